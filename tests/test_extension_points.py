"""Worked examples of docs/architecture.md's "Where a new feature goes": each adds a throwaway piece the way
the table says -- one class and its registration, or one documented field -- and nothing else changes.
(A checkpoint policy: tests/test_engine_config.py adds one by name and one as an object.)"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from typing import ClassVar

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.cache import NoPrefixCache
from kda_ref.cache import options as cache_options_mod
from kda_ref.utils.config_fields import documented
from kda_ref.model import HybridModel, kda_layer
from kda_ref.model.parts import LowRankOutputGate, SoftplusForgetGate
from kda_ref.speculative import config as spec_config
from kda_ref.speculative import drafter, drafters, rollback
from kda_ref.trace import TraceRecorder

PARAMS = SamplingParams(max_tokens=10, ignore_eos=True)
PROMPT = [5, 6, 7, 5, 6, 7, 5, 6]


@pytest.fixture(scope="module")
def model():
    return HybridModel(ModelConfig.micro(), seed=0).eval()


@pytest.fixture(scope="module")
def plain(model):
    return LLM(model).generate([PROMPT], PARAMS)[0].token_ids


class EchoDrafter(drafter.Drafter):
    """A drafter that proposes the last token again, k times: one subclass of the declared contract with its
    three abstract methods; the capabilities keep their defaults (no model, no suffix lookup, no trees)."""

    @classmethod
    def build(cls, spec, draft_model=None, max_tokens: int = 0, target=None):
        return cls()

    def propose(self, seq_id, tokens, k):
        return [tokens[-1]] * k

    def release(self, seq_id):
        pass


def test_a_new_drafter_is_one_class_and_its_registration(model, plain, monkeypatch):
    monkeypatch.setitem(drafters.DRAFTERS, "echo", EchoDrafter)
    llm = LLM(model, speculative="echo", num_speculative_tokens=2)
    assert llm.generate([PROMPT], PARAMS)[0].token_ids == plain
    assert llm.stats()["spec_verify_steps"] > 0
    with pytest.raises(ValueError, match="^spec_tree_width: draft trees come from a drafter that proposes them"):
        LLM(model, speculative="echo", spec_tree_width=2)  # asked of the class, not of its name


def test_the_drafter_contract_refuses_a_misspelt_or_missing_part(model, monkeypatch):
    """A misspelt capability (``need_hidden`` would have turned MTP drafting off silently) or method
    (``obsrve``: the default would run instead), trees claimed without ``propose_tree``, hidden rows
    asked for without ``observe``, a missing abstract method, or a registered class outside the contract."""
    with pytest.raises(TypeError, match="need_hidden: not a drafter capability .*did you mean needs_hidden"):
        type("Misspelt", (EchoDrafter,), {"need_hidden": True})
    with pytest.raises(TypeError, match="supports_trees is set but propose_tree is not defined"):
        type("NoTree", (EchoDrafter,), {"supports_trees": True})
    with pytest.raises(TypeError, match="needs_hidden is set but observe is not defined"):
        type("NoObserve", (EchoDrafter,), {"needs_hidden": True})
    for misspelt, meant in (("obsrve", "observe"), ("cache_bytes_fr", "cache_bytes_for"),
                            ("compile_step", "compile_steps"), ("propose_trees", "propose_tree")):
        with pytest.raises(TypeError, match=f"{misspelt}: not a Drafter method; did you mean {meant}\\?"):
            type("Misspelt", (EchoDrafter,), {misspelt: lambda self, *a: 0})
    type("Helper", (EchoDrafter,), {"kv_rows": lambda self, s: 0})  # a method of its own, unlike any: fine
    with pytest.raises(TypeError, match="abstract"):
        type("NoRelease", (drafter.Drafter,), {"build": classmethod(lambda c, *a, **k: c()),
                                               "propose": lambda self, s, t, k: []})()
    monkeypatch.setitem(drafters.DRAFTERS, "duck", type("Duck", (), {"needs_model": False,
                                                                     "looks_up_suffixes": False}))
    with pytest.raises(TypeError, match="not a Drafter subclass"):
        LLM(model, speculative="duck")
    assert (EchoDrafter.needs_hidden, EchoDrafter.supports_trees, EchoDrafter().cache_bytes_for(100)) == \
        (False, False, 0)


class CopyEachStep(rollback.PerStepStates):
    """A rollback strategy under a name of its own (the same commit as per_step's)."""

    name = "copy_each_step"


def test_a_new_rollback_strategy_is_one_class_and_its_registration(model, plain, monkeypatch):
    monkeypatch.setitem(spec_config.STRATEGIES, CopyEachStep.name, CopyEachStep())
    monkeypatch.setitem(drafters.DRAFTERS, "echo", EchoDrafter)  # drafts every step (a random model's n-grams rarely recur)
    rec = TraceRecorder()
    llm = LLM(model, speculative="echo", spec_state="copy_each_step", tracer=rec)
    assert llm.generate([PROMPT], PARAMS)[0].token_ids == plain
    verifies = rec.events_of("spec_verify")
    assert verifies and {e.strategy for e in verifies} == {"copy_each_step"}  # the trace takes any strategy's name


@dataclasses.dataclass(frozen=True)
class KeepNothingOptions(cache_options_mod.CacheOptionsBase):
    """A throwaway prefix cache: one options class (a kind, a documented option, the four methods) whose
    cache admits every request as a miss and counts them."""

    kind: ClassVar[str] = "keep_nothing"
    note: str = documented("quiet", "a throwaway option (LLM's flat keyword note=)", kind="str")

    def page_size(self) -> int:
        return 16

    def page_size_rule(self) -> str:
        return "any page size"

    def check(self, chunk_size: int) -> None:
        pass

    def build(self, pool, *, chunk_size, tracer, clock, cost):
        return CountingCache(pool, tracer, clock)


class CountingCache(NoPrefixCache):
    kind = "keep_nothing"
    asked: list = []  # the requests admit() was asked about

    def admit(self, seq, reuse: bool = True) -> int:
        self.asked.append(seq.req_id)
        return 0


def test_a_new_prefix_cache_is_one_options_class_and_its_registration(model, plain, monkeypatch):
    from kda_ref.engine.config import EngineConfig

    monkeypatch.setitem(cache_options_mod.CACHE_OPTION_TYPES, "keep_nothing", None)  # undone after the test
    assert cache_options_mod.register_prefix_cache(KeepNothingOptions) is KeepNothingOptions
    assert "keep_nothing" in cache_options_mod.prefix_cache_modes()
    monkeypatch.setattr(CountingCache, "asked", [])
    llm = LLM(model, prefix_cache="keep_nothing", note="loud")  # its flat keyword, checked by name
    assert isinstance(llm.prefix_cache, CountingCache) and llm.cache_options.note == "loud"
    assert llm.generate([PROMPT], PARAMS)[0].token_ids == plain and CountingCache.asked == [0]
    cfg = EngineConfig.from_kwargs(prefix_cache="keep_nothing")
    assert EngineConfig.from_kwargs(**cfg.to_kwargs()) == cfg
    with pytest.raises(ValueError, match=r"^options: \['block_size'\] do not apply to the keep_nothing cache"):
        LLM(model, prefix_cache="keep_nothing", block_size=64)
    with pytest.raises(TypeError, match="expected a CacheOptionsBase subclass"):
        cache_options_mod.register_prefix_cache(dict)


def test_a_prefix_cache_named_none_is_refused_and_not_registered(monkeypatch):
    """``"none"`` is the ``prefix_cache=`` name of no prefix cache: a cache registered under it is refused by
    name, and the registry is left as it was."""
    before = dict(cache_options_mod.CACHE_OPTION_TYPES)
    registry = dict(before)
    monkeypatch.setattr(cache_options_mod, "CACHE_OPTION_TYPES", registry)  # a planted bug cannot leak out
    NoneOptions = type("NoneOptions", (KeepNothingOptions,), {"kind": "none"})
    with pytest.raises(ValueError, match=r"^register_prefix_cache: 'none' means no prefix cache"):
        cache_options_mod.register_prefix_cache(NoneOptions)
    assert registry == before and "none" not in registry
    assert cache_options_mod.prefix_cache_modes().count("none") == 1
    assert cache_options_mod.cache_options("none") is None


def test_a_new_engine_setting_is_one_documented_field(monkeypatch):
    """A field with its documentation and range on a configuration part: the part checks it when built, the
    Lab's form offers it (help: its documentation), with nothing else edited."""
    from kda_ref.engine.config import SchedulerConfig
    from kda_ref.utils.config_fields import documented
    from model_viz.scenarios import lab

    @dataclasses.dataclass(frozen=True)
    class WithPatience(SchedulerConfig):
        patience: int = documented(3, "steps a request may wait before it is admitted first", min=1, max=100)

    with pytest.raises(ValueError, match=r"^patience: must be an int in \[1, 100\], got 0"):
        WithPatience(patience=0)
    groups = tuple((g, WithPatience if cls is SchedulerConfig else cls) for g, cls in lab.FORM_GROUPS)
    monkeypatch.setattr(lab, "FORM_GROUPS", groups)
    offered = {s["name"]: s for s in lab.form_fields()["scheduler"]}
    assert offered["patience"]["doc"].startswith("steps a request may wait") and offered["patience"]["max"] == 100


def test_a_new_page_is_its_files_and_one_entry():
    """A page is ``app_pages/<slug>.py``, its strings (keys ``<slug>.*`` in ``model_viz/data/strings.<lang>.json``) (its scenario and
    figures where it runs the engine and draws), and one PageEntry: the navigation, the home page's links
    and the string namespaces are all read from that one table."""
    from model_viz import i18n
    from model_viz.ui.page_index import PAGES

    assert i18n.NAMESPACES == ("common", *(p.slug for p in PAGES))
    app = (__import__("pathlib").Path(__file__).resolve().parents[1] / "app.py").read_text()
    assert "for p in PAGES" in app and not any(f'"{p.slug}"' in app for p in PAGES if p.slug != "home")


class HalvedDecay(SoftplusForgetGate):
    """A throwaway forget gate: Kimi-Linear's decay, halved. One part with both forms; nothing else changes."""

    def reference(self, raw, a_log, dt_bias, head_dim):
        return 0.5 * super().reference(raw, a_log, dt_bias, head_dim)

    def fused_(self, f, a, dt_bias):
        return super().fused_(f, a, dt_bias).mul_(0.5)


def test_a_new_model_variant_is_one_part_chosen_where_its_layer_is_built(model, monkeypatch):
    """A model variant's change to a layer is a part (kda_ref/model/parts.py) chosen where the layer is built:
    the engine's fused decode steps and the stateless reference form both follow it, token by token."""
    monkeypatch.setattr(kda_layer, "kda_parts", lambda config: (HalvedDecay(), LowRankOutputGate()))
    variant = HybridModel(ModelConfig.micro(), seed=0).eval()  # the same weights as ``model``
    out = LLM(variant).generate([PROMPT], dataclasses.replace(PARAMS, return_logits=True))[0]
    ids = torch.tensor(PROMPT + out.token_ids[:-1])
    with torch.no_grad():
        reference, plain = variant(ids), model(ids)  # [T, V], the reference form of the whole sequence
    torch.testing.assert_close(out.logits, reference[len(PROMPT) - 1:], atol=1e-4, rtol=1e-4)
    assert (reference - plain).abs().max() > 1e-2  # the part is the one both forms ran
