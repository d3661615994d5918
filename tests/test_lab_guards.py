"""The Lab refuses bad input where it enters, with its typed error, before any work.

* an uploaded trace's block-cache snapshots are checked and bounded where the header is read: a
  malformed one is the reader's ``TraceError`` (a message on the page, the other views still draw),
  and block boundaries are one shape however many there are (``block_size: 1`` over 400 tokens once
  took 69 s to draw: one shape per boundary);
* a checkpoint folder path the OS cannot take (a NUL byte, 5,000 characters) is a ``LabError``, and a
  folder holding a file that resolves outside the allowed folders (a symlink) or a FIFO is refused
  before anything is loaded;
* every request's prompt is bounded in the tokens the engine sees (a text gets its BOS), and every
  conversation turn's grown prompt before the first turn runs.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from apptest_util import chart_specs, open_page
from kda_ref import LLM, SamplingParams
from model_viz.figures import lab as lab_fig
from model_viz.i18n import t
from model_viz.scenarios import common as cs
from model_viz.scenarios import lab
from model_viz.scenarios.engine_trace import TraceError
from model_viz.i18n import in_language

PAGE = "app_pages/lab.py"


@pytest.fixture(scope="module")
def model():
    return cs.trained_model()


@pytest.fixture(scope="module")
def block_run(model):
    return lab.run_lab(model, ["The KDA state is a matrix", "The KDA state is a matrix per head"],
                       SamplingParams(max_tokens=3, ignore_eos=True), mode="sequential", prefix_cache="block",
                       block_size=32, hash_unit=16)


def _units(tokens: int, unit: int = 16) -> list[dict]:
    return [{"end": e, "kv": True, "state": e if e % 64 == 0 else None} for e in range(unit, tokens + 1, unit)]


def _trace(run, **snapshot) -> bytes:
    """``run``'s JSONL with the fields of its header's first block snapshot replaced by ``snapshot``."""
    header, *lines = run.jsonl().splitlines()
    head = json.loads(header)
    head["block_steps"][0].update(snapshot)
    return "\n".join([json.dumps(head), *lines]).encode()


def _upload(at, data: bytes, name: str = "blocks.jsonl"):
    at.file_uploader(key="lab_upload").upload(name, data, "application/json").run(timeout=120)
    assert not at.exception, at.exception
    return at


def _block_chart(at, lang: str = "en") -> dict | None:
    """The block-cache figure on the page (its KV bar series named in ``lang``), if drawn."""
    name = t("lab.fig.kv_unit", lang)
    return next((s for s in chart_specs(at) if any(d.get("name") == name for d in s.get("data", []))), None)


# ---- block snapshots: drawn in linear time, checked where they are read -------------------------------------
def test_block_boundaries_are_one_shape_drawn_in_linear_time():
    for tokens in (400, 4000):
        step = lab_fig.read_block_steps({"block_steps": [{"steps": [1, 2], "block_size": 1,
                                                          "units": _units(tokens)}]})[0]
        t0 = time.perf_counter()
        fig = in_language("en", lab_fig.block_figure, step)
        fig.to_json()  # what the page sends
        assert time.perf_counter() - t0 < 0.5, tokens
        (shape,) = fig.layout.shapes
        assert shape.path.count("M ") == tokens and len(fig.data) == 2


def test_an_upload_with_block_size_1_and_400_tokens_draws_at_once(block_run):
    at = open_page(PAGE, "en")
    elapsed = {}
    for size in (512, 1):
        t0 = time.perf_counter()
        _upload(at, _trace(block_run, block_size=size, units=_units(400)), f"size{size}.jsonl")
        elapsed[size] = time.perf_counter() - t0
        assert not at.error
    spec = _block_chart(at)
    assert spec and spec["layout"]["shapes"][0]["path"].count("M ") == 400
    assert elapsed[1] < elapsed[512] + 1.0, elapsed  # the 400 boundaries add well under a second


MALFORMED = [  # (the snapshot's fields replaced, what the message names)
    ({"steps": []}, "block_steps[0].steps"),
    ({"steps": "ab"}, "block_steps[0].steps"),
    ({"steps": [1, "2"]}, "block_steps[0].steps"),
    ({"block_size": "32"}, "block_steps[0].block_size"),
    ({"block_size": 0}, "block_steps[0].block_size"),
    ({"block_size": True}, "block_steps[0].block_size"),
    ({"units": "x"}, "block_steps[0].units"),
    ({"units": [{"end": "16", "kv": True}]}, "block_steps[0].units[0]"),
    ({"units": [{"end": 32, "kv": True}, {"end": 16, "kv": True}]}, "block_steps[0].units[1].end"),
    ({"units": [{"end": lab_fig.MAX_BLOCK_TOKENS + 1, "kv": True}]}, "block_steps[0].units[0].end"),
    ({"units": _units(lab_fig.MAX_BLOCK_TOKENS + 1, 1)}, "block_steps[0].units must be a list of at most"),
    ({"label": ["not", "text"], "steps": None}, "block_steps[0].steps"),
]


@pytest.mark.parametrize("fields,names", MALFORMED, ids=[n + ":" + next(iter(f)) for f, n in MALFORMED])
def test_malformed_block_snapshots_are_the_readers_typed_error(fields, names):
    snap = {"steps": [1, 2], "block_size": 32, "units": _units(64), **fields}
    with pytest.raises(TraceError) as err:
        lab_fig.read_block_steps({"block_steps": [snap]})
    assert err.value.key == "lab.err.bad_blocks" and names in str(err.value)
    assert lab_fig.block_steps({"block_steps": [snap]}) == []  # not drawn


def test_the_snapshot_list_itself_is_checked_and_bounded():
    good = {"steps": [1, 2], "block_size": 1, "units": []}
    for whole in ("x", {"0": good}, [good] * (lab_fig.MAX_BLOCK_STEPS + 1)):
        with pytest.raises(TraceError, match="block_steps must be a list of at most"):
            lab_fig.read_block_steps({"block_steps": whole})
    assert lab_fig.read_block_steps({}) == [] and len(lab_fig.read_block_steps({"block_steps": [good] * 3})) == 3


@pytest.mark.parametrize("lang,fields", [("en", {"steps": []}), ("en", {"steps": "ab"}),
                                         ("zh", {"block_size": "32"})])
def test_an_upload_with_malformed_block_snapshots_is_a_message_and_the_other_views_still_draw(block_run, lang,
                                                                                                fields):
    data = _trace(block_run, **fields)
    with pytest.raises(TraceError) as err:  # what the reader says of it
        lab_fig.read_block_steps(json.loads(data.splitlines()[0]))
    at = _upload(open_page(PAGE, lang), data)
    assert [e.value for e in at.error] == [err.value.message()]
    assert f"block_steps[0].{next(iter(fields))}" in err.value.message()
    assert len(chart_specs(at)) >= 4 and _block_chart(at, lang) is None  # the chain and the pool still draw


# ---- checkpoint folders --------------------------------------------------------------------------------
@pytest.fixture
def folders(tmp_path):
    """``(allowed root, a real checkpoint folder in it, a folder outside, the environment)``."""
    from kda_ref.model import HybridModel, ModelConfig, save_pretrained

    allowed, outside = tmp_path / "models", tmp_path / "outside"
    outside.mkdir()
    save_pretrained(HybridModel(ModelConfig.tiny(), seed=0), allowed / "m")
    return allowed, allowed / "m", outside, {lab.MODEL_DIRS_ENV: str(allowed)}


def test_a_path_the_os_cannot_take_is_a_lab_error(folders):
    """A NUL byte or more characters than any path: refused before the OS is asked (a ``ValueError`` /
    ``OSError`` before); a name longer than the OS takes: the OS's answer, as a ``LabError``."""
    allowed, _, _, env = folders
    for path, key in [("a\0b", "lab.err.path_nul"), (f"{allowed}/m\0x", "lab.err.path_nul"),
                      ("x" * 5000, "lab.err.path_long"), (f"{allowed}/" + "x" * 5000, "lab.err.path_long"),
                      (f"{allowed}/" + "y" * 300, "lab.err.bad_path")]:
        with pytest.raises(lab.LabError) as err:
            lab.check_model_folder(path, env)
        assert err.value.key == key, path[:80]
        assert in_language("zh", err.value.message) != str(err.value)


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer_config.json", "extra.bin"])
def test_a_file_resolving_outside_the_allowed_folders_refuses_the_folder(folders, monkeypatch, name):
    allowed, m, outside, env = folders
    target = outside / name
    if (m / name).exists():
        (m / name).rename(target)
    else:
        target.write_text("{}")
    (m / name).symlink_to(target)
    with pytest.raises(lab.LabError) as err:
        lab.check_model_folder(str(m), env)
    assert err.value.key == "lab.err.escapes" and err.value.fmt["name"] == name
    assert err.value.fmt["target"] == str(target.resolve())
    monkeypatch.setenv(lab.MODEL_DIRS_ENV, str(allowed))
    import kda_ref.model as km

    monkeypatch.setattr(km, "load_pretrained", lambda *a, **k: pytest.fail("the folder was loaded"))
    with pytest.raises(lab.LabError) as err:
        lab.load_model("folder", str(m))
    assert err.value.key == "lab.err.escapes"


def test_links_inside_the_allowed_folders_and_subfolders_are_fine_but_a_fifo_is_not(folders):
    allowed, m, outside, env = folders
    (allowed / "shared").mkdir()
    (m / "tokenizer_config.json").rename(allowed / "shared" / "tokenizer_config.json")
    (m / "tokenizer_config.json").symlink_to(allowed / "shared" / "tokenizer_config.json")
    (m / "notes").mkdir()
    assert lab.check_model_folder(str(m), env) == m.resolve()
    os.mkfifo(m / "weights.safetensors")  # globbed by the loader: reading it would hang
    with pytest.raises(lab.LabError) as err:
        lab.check_model_folder(str(m), env)
    assert err.value.key == "lab.err.not_a_file" and err.value.fmt["name"] == "weights.safetensors"
    (m / "weights.safetensors").unlink()
    (m / "elsewhere").symlink_to(outside, target_is_directory=True)  # a link to a folder outside: refused too
    with pytest.raises(lab.LabError) as err:
        lab.check_model_folder(str(m), env)
    assert err.value.key == "lab.err.escapes"


def test_a_folder_with_thousands_of_entries_is_refused(folders):
    allowed, m, _, env = folders
    for i in range(lab.MAX_FOLDER_ENTRIES):
        (m / f"f{i}").touch()
    with pytest.raises(lab.LabError) as err:
        lab.check_model_folder(str(m), env)
    assert err.value.key == "lab.err.too_many_files"


def test_the_page_shows_a_bad_folder_path_as_a_message(tmp_path, monkeypatch):
    monkeypatch.setenv(lab.MODEL_DIRS_ENV, str(tmp_path))
    at = open_page(PAGE, "en")
    at.radio(key="lab_model_en").set_value("folder").run()
    at.text_input(key="lab_folder").set_value(str(tmp_path) + "/" + "x" * 5000).run()
    at.button(key="lab_run").click().run(timeout=120)
    assert not at.exception and [e.value for e in at.error] == [
        t("lab.err.path_long", "en", n=len(str(tmp_path)) + 5001, max=4096)]


# ---- prompts counted in tokens, every turn before the first runs -----------------------------------------------
@pytest.fixture
def generate_calls(monkeypatch):
    """The prompts of every ``LLM.generate`` call (the engine still runs them)."""
    calls, real = [], LLM.generate

    def spy(self, prompts, *a, **k):
        calls.append(prompts)
        return real(self, prompts, *a, **k)

    monkeypatch.setattr(LLM, "generate", spy)
    return calls


def test_a_conversation_that_outgrows_the_bound_is_refused_before_its_first_turn(model, generate_calls):
    t0 = time.perf_counter()
    with pytest.raises(lab.LabError) as err:  # turns of 501 (with BOS), 20 + 500, 20 + 500 tokens
        lab.run_lab(model, ["a" * 500, "b" * 500, "c" * 500], SamplingParams(max_tokens=20, ignore_eos=True),
                    mode="conversation")
    assert err.value.key == "lab.err.turn_tokens" and err.value.fmt == {"i": 3, "n": 1541, "max": 1024}
    assert generate_calls == [] and time.perf_counter() - t0 < 5.0


def test_each_turns_bound_uses_max_tokens_and_exactly_the_bound_runs(model, generate_calls):
    sampling = SamplingParams(max_tokens=4, ignore_eos=True)
    first, second = "The state", "is a matrix"  # 10 tokens with BOS; 11 more (no BOS)
    bound = 10 + 4 + 11
    run = lab.run_lab(model, [first, second], sampling, mode="conversation", limits=lab.Limits(prompt_tokens=bound))
    assert [len(p) for p in run.prompts] == [10, bound] and len(generate_calls) == 2
    with pytest.raises(lab.LabError) as err:
        lab.run_lab(model, [first, second], sampling, mode="conversation", limits=lab.Limits(prompt_tokens=bound - 1))
    assert err.value.fmt == {"i": 2, "n": bound, "max": bound - 1} and len(generate_calls) == 2


def test_a_text_prompt_is_counted_in_the_tokens_the_model_sees(model, generate_calls):
    with pytest.raises(lab.LabError) as err:  # 2,000 bytes pass the byte bound; with BOS they are 2,001 tokens
        lab.run_lab(model, ["x" * lab.LIMITS.prompt_bytes], SamplingParams(max_tokens=2, ignore_eos=True))
    assert err.value.key == "lab.err.prompt_tokens"
    assert err.value.fmt == {"i": 1, "n": lab.LIMITS.prompt_bytes + 1, "max": lab.LIMITS.prompt_tokens}
    sampling = SamplingParams(max_tokens=2, ignore_eos=True)
    lab.run_lab(model, ["ok", "y" * 99], sampling, mode="sequential", limits=lab.Limits(prompt_tokens=100))
    assert len(generate_calls) == 2  # exactly at the bound: runs
    with pytest.raises(lab.LabError) as err:
        lab.run_lab(model, ["ok", "y" * 99], sampling, mode="sequential", limits=lab.Limits(prompt_tokens=99))
    assert err.value.fmt == {"i": 2, "n": 100, "max": 99} and len(generate_calls) == 2  # nothing ran


def test_the_page_refuses_a_text_longer_than_the_token_bound():
    at = open_page(PAGE, "zh")
    at.text_area(key="lab_prompts").set_value("é" * 600).run()  # 1,200 bytes: 1,201 tokens with BOS
    at.button(key="lab_run").click().run(timeout=120)
    assert not at.exception and [e.value for e in at.error] == [
        t("lab.err.prompt_tokens", "zh", i=1, n=1201, max=lab.LIMITS.prompt_tokens)]
