"""``SpecConfig``: what ``LLM(speculative=...)`` asks for, validated before anything is allocated.

The names follow vLLM's ``vllm/config/speculative.py::SpeculativeConfig`` (``method``: ``"ngram"``, a draft model
or ``"mtp"``; ``num_speculative_tokens``, ``prompt_lookup_min`` / ``prompt_lookup_max``). ``state`` is how the KDA
state survives a rejection: ``"per_step"`` (SGLang's ``TritonKDAKernel.target_verify`` buffers), ``"slots"``
(vLLM's ``GDNAttentionMetadata.spec_state_indices_tensor``), ``"replay"`` (ReplaySSM) or ``"recoverssm"`` (vLLM's
RecoverSSM for Kimi K3). ``tree_width > 1`` drafts a token tree: n-gram drafting and ``"per_step"`` only.
Design notes: ``docs/spec_decode.md#rollback-strategies``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING

from ..utils.config_fields import check_fields, flat_names
from ..utils.config_fields import documented as _f
from ..utils.lazy import LazyRegistry
from ..utils.limits import MAX_PROMPT_LOOKUP
from .drafters import DRAFTERS

if TYPE_CHECKING:
    from .strategy import RollbackStrategy

LOOKUP_MIN, LOOKUP_MAX = 1, 4  # the n-gram drafter's default suffix lengths
# every spec_state by name, in the order the docs, the page and the benchmarks show them: the strategy
# objects of kda_ref.speculative.rollback, imported when one is looked up (the names are read without torch)
STRATEGIES = LazyRegistry({name: f"kda_ref.speculative.rollback:{attr}" for name, attr in
                           (("per_step", "PER_STEP"), ("slots", "SLOTS"), ("replay", "REPLAY"),
                            ("recoverssm", "RECOVER"))})
SPEC_METHODS = tuple(DRAFTERS)  # "ngram", "draft" (as imported: registries are the choices when checked)
SPEC_STATES = tuple(STRATEGIES)  # "per_step", "slots", "replay", "recoverssm" (the registry's order)
MAX_SPECULATIVE_TOKENS = 16
MAX_TREE_WIDTH = 8


def _is_draft_model(v) -> bool:
    """A built model, a config, or a non-empty path (that it is a checkpoint folder is checked when loaded)."""
    from ..model import HybridModel, ModelConfig

    return isinstance(v, (HybridModel, ModelConfig)) or (isinstance(v, (str, PurePath)) and str(v).strip() != "")


def _int(name: str, v, lo: int, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name}: must be an int {bound}, got {v!r}")
    return v


@dataclass(frozen=True)
class SpecConfig:
    method: str = _f("ngram", "the drafter: n-gram lookup in the request's own tokens, a draft model, or "
                     "the served model's own MTP layer", choices=DRAFTERS, kind="str", flat="speculative")
    num_speculative_tokens: int = _f(3, "k: draft tokens verified per step", min=1, max=MAX_SPECULATIVE_TOKENS)
    state: str | RollbackStrategy = _f("per_step", "how the KDA state rolls back after a rejection",
                                       choices=STRATEGIES, kind="str", flat="spec_state")
    prompt_lookup_min: int = _f(LOOKUP_MIN, "the shortest suffix n-gram the drafter matches", min=1,
                                max=MAX_PROMPT_LOOKUP)
    prompt_lookup_max: int = _f(LOOKUP_MAX, "the longest (tried first)", min=1, max=MAX_PROMPT_LOOKUP,
                                range_text=f"in [prompt_lookup_min, {MAX_PROMPT_LOOKUP}]")
    draft_model: object = _f(None, "speculative='draft': a HybridModel, ModelConfig or checkpoint folder",
                             kind="object", optional=True)
    tree_width: int = _f(1, "> 1: a draft tree with up to this many candidates per position (ngram, per_step)",
                         min=1, max=MAX_TREE_WIDTH, flat="spec_tree_width")

    def lookahead_tokens(self) -> int:
        """KV positions a request may hold past ``prompt + max_tokens``: a draft tree's nodes are written
        after its root, so a tree of width ``w`` and depth ``k`` reaches ``(w - 1) * k - 1`` past them (a
        chain's drafts never do: they stop one short of ``max_tokens``); the engine's peak counts them
        (:func:`kda_ref.engine.demand.request_demand`)."""
        if self.tree_width == 1 or not DRAFTERS[self.method].supports_trees:
            return 0
        return max(0, (self.tree_width - 1) * self.num_speculative_tokens - 1)

    @property
    def rollback(self) -> RollbackStrategy:
        """The :class:`~kda_ref.speculative.rollback.RollbackStrategy` of ``state``."""
        return rollback_strategy(self.state)

    def __post_init__(self) -> None:
        # every field from its documentation and range; a strategy given as an object checks itself
        rollback_strategy(self.state)  # a name of SPEC_STATES (named in its error) or a RollbackStrategy
        check_fields(self, skip=("state",))
        _int("prompt_lookup_max", self.prompt_lookup_max, self.prompt_lookup_min, MAX_PROMPT_LOOKUP)
        drafter = DRAFTERS[self.method]  # checked a registered name by check_fields above
        if drafter.needs_model != (self.draft_model is not None):
            raise ValueError(f"draft_model: needed with speculative='draft' (a drafter that runs a model), and only "
                             f"then; got speculative={self.method!r}")
        if self.draft_model is not None and not _is_draft_model(self.draft_model):
            raise ValueError(f"draft_model: expected a HybridModel, a ModelConfig or a checkpoint folder path, got "
                             f"{type(self.draft_model).__name__} {str(self.draft_model)[:40]!r}")
        if self.tree_width > 1 and not self.rollback.supports_trees:
            raise ValueError(f"spec_tree_width: a draft tree needs spec_state='per_step' -- every node's state is "
                             f"its parent's stepped by its token; {self.rollback.name!r} keeps one state per position "
                             f"('slots') or a chain of per-token records ('replay', 'recoverssm'), none can hold siblings")
        if not drafter.looks_up_suffixes and (self.prompt_lookup_min, self.prompt_lookup_max) != (LOOKUP_MIN, LOOKUP_MAX):
            raise ValueError(f"prompt_lookup_min / prompt_lookup_max: only a drafter that looks up suffixes (the n-gram "
                             f"drafter, speculative='ngram') takes them, not speculative={self.method!r}")
        if self.tree_width > 1 and not drafter.supports_trees:
            raise ValueError(f"spec_tree_width: draft trees come from a drafter that proposes them (the n-gram drafter, "
                             f"speculative='ngram'), not speculative={self.method!r}")


SPEC_KEYWORDS = flat_names(SpecConfig)  # LLM's keyword -> SpecConfig's field ("spec_state" -> "state", ...)


def spec_config(speculative=None, **flat) -> SpecConfig | None:
    """``LLM``'s speculative keywords (:data:`SPEC_KEYWORDS`: ``speculative``, ``num_speculative_tokens``,
    ``spec_state``, ...) as one :class:`SpecConfig` (``None``: no speculation); a speculative argument
    without ``speculative``, or beside a ``SpecConfig`` (which already says everything), is an error, not
    silently ignored."""
    given = [n for n, v in flat.items() if v is not None]
    name = given[0] if given else None
    if speculative is None:
        if given:
            raise ValueError(f"{name}: given without speculative=... (speculation is off)")
        return None
    if isinstance(speculative, SpecConfig):
        if given:
            raise ValueError(f"{name}: given beside speculative=SpecConfig(...); set it in the SpecConfig")
        return speculative
    args = {SPEC_KEYWORDS[k]: v for k, v in flat.items() if v is not None}
    # a shortest suffix given alone above the default longest one raises the longest to it (vLLM sets a
    # missing bound equal to the given one; here the default window 1 .. 4 stays otherwise)
    lo = args.get("prompt_lookup_min")
    if isinstance(lo, int) and "prompt_lookup_max" not in args and lo > LOOKUP_MAX:
        args["prompt_lookup_max"] = lo
    return SpecConfig(method=speculative, **args)


def rollback_strategy(state: str | RollbackStrategy) -> RollbackStrategy:
    """The strategy named ``state`` (a name of :data:`STRATEGIES`), or ``state`` itself."""
    from .strategy import RollbackStrategy

    if isinstance(state, RollbackStrategy):
        return state
    if not isinstance(state, str) or state not in STRATEGIES:
        raise ValueError(f"spec_state: must be one of {tuple(STRATEGIES)} or a RollbackStrategy, got {state!r}")
    return STRATEGIES[state]


def rollback_bytes(cfg, k: int, state, state_bytes: int | None = None) -> int:
    """Rollback storage of one request verifying ``k`` drafts under ``state`` (a ``spec_state`` name or a
    :class:`~kda_ref.speculative.RollbackStrategy`), at any model's size (``cfg``, a ``ModelConfig``): ``1 + k``
    states for ``per_step`` and ``slots``, ``1 + k`` fp32 token records for ``replay`` and ``recoverssm``
    (each strategy's ``request_bytes``; the table: ``docs/spec_decode.md#one-step``). ``state_bytes`` (one
    state, all KDA layers) defaults to the config's fp32-state / bf16-conv arithmetic (``ModelConfig.state_bytes``)."""
    per_state = cfg.state_bytes()["kda_per_seq"] if state_bytes is None else state_bytes
    return rollback_strategy(state).request_bytes(cfg, k, per_state)
