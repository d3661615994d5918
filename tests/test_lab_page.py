"""The Lab page, headless (AppTest): type a workload, run it, step, compare two configurations, download;
bad input gets a message and the page stays usable, in English and Chinese."""

from __future__ import annotations

import json

import pytest

from apptest_util import chart_specs, open_page
from model_viz.i18n import t
from model_viz.scenarios import lab

PAGE = "app_pages/lab.py"


def _run(at):
    at.button(key="lab_run").click().run(timeout=180)
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_type_run_step_compare_and_download(lang):
    at = open_page(PAGE, lang)
    assert at.info and at.info[0].value == t("lab.no_run", lang)  # nothing run yet
    at.text_area(key="lab_prompts").set_value("The state is\n---\nThe state is a matrix").run()
    _run(at)
    assert len(chart_specs(at)) >= 5  # the chain, the pool, the radix tree
    steps = at.session_state["lab_step"]
    at.button(key="lab_next").click().run()
    assert at.session_state["lab_step"] == steps + 1
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == [t("lab.download_jsonl", lang), t("lab.download_chrome", lang)]
    at.checkbox(key="lab_compare").check().run()
    _run(at)
    assert [s.value for s in at.success] == [t("lab.cmp_same", lang, n=2)]
    table = at.dataframe[0].value
    assert list(table.columns)[:3] == [t("lab.col.total", lang), "A", "B"]
    at.radio(key=f"lab_shown_{lang}").set_value("B").run()
    assert not at.exception
    titles = [json.dumps(s.get("layout", {}).get("title", ""), ensure_ascii=False) for s in chart_specs(at)]
    assert any("verif" in x.lower() or "投机" in x for x in titles)  # B speculates: its verify steps are drawn


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_bad_input_is_a_message_and_the_page_stays_usable(lang):
    at = open_page(PAGE, lang)
    at.text_area(key="lab_prompts").set_value("   ").run()
    _run(at)
    assert [e.value for e in at.error] == [t("lab.err.no_prompts", lang)]
    at.text_area(key="lab_prompts").set_value("x" * (lab.LIMITS.prompt_bytes + 1)).run()
    _run(at)
    assert [e.value for e in at.error] == [t("lab.err.prompt_bytes", lang, i=1, n=lab.LIMITS.prompt_bytes + 1,
                                             max=lab.LIMITS.prompt_bytes)]
    at.number_input(key="lab_a_max_num_seqs").set_value(1).run()
    at.text_area(key="lab_prompts").set_value("a short prompt").run()
    _run(at)
    assert not at.error and at.get("download_button")


def test_an_unreadable_folder_is_a_message(tmp_path, monkeypatch):
    (tmp_path / "broken").mkdir()
    monkeypatch.setenv(lab.MODEL_DIRS_ENV, str(tmp_path))
    at = open_page(PAGE, "en")
    at.radio(key="lab_model_en").set_value("folder").run()
    at.text_input(key="lab_folder").set_value(str(tmp_path / "broken")).run()
    _run(at)
    assert [e.value for e in at.error] == [t("lab.err.unreadable", "en", path=str(tmp_path / "broken"))]
    at.text_input(key="lab_folder").set_value("/etc").run()
    _run(at)
    assert [e.value for e in at.error] == [t("lab.err.not_allowed", "en", path="/etc", env=lab.MODEL_DIRS_ENV)]


def test_a_workload_family_runs_on_the_page():
    at = open_page(PAGE, "en")
    at.radio(key="lab_source_en").set_value("family").run()
    at.selectbox(key="lab_family").set_value("shared_system_prompt").run()
    at.number_input(key="lab_family_n").set_value(2).run()
    at.slider(key="lab_max_tokens").set_value(4).run()
    _run(at)
    assert not at.error and len(at.dataframe) >= 2


def test_any_trace_can_be_opened_and_exported_for_perfetto():
    """A trace the engine wrote elsewhere (here the execution-chain page's) opens in the Lab's views; a
    broken one is a message."""
    from model_viz.scenarios import engine_trace as et

    at = open_page(PAGE, "en")
    text = et.run_scenario((20, 12), token_budget=16)
    _upload(at, text.encode(), "chain.jsonl")
    assert not at.error and len(chart_specs(at)) >= 4
    assert [b.proto.label for b in at.get("download_button")] == [t("lab.download_chrome", "en")]
    chrome = json.loads(lab.chrome_json(*et.parse_trace(text)))
    assert {e["tid"] for e in chrome["traceEvents"] if e["pid"] == 2 and e["ph"] == "X"} == {0, 1, 2, 3}
    _upload(at, b'{"not": "a trace"}\n', "bad.jsonl")
    assert at.error and not at.exception



def _upload(at, data: bytes, name: str):
    at.file_uploader(key="lab_upload").upload(name, data, "application/json").run(timeout=120)
    assert not at.exception, at.exception


def test_an_upload_with_a_malformed_tree_is_a_message_and_the_other_views_still_draw(tmp_path):
    from kda_ref import SamplingParams
    from model_viz.scenarios import common as cs

    run = lab.run_lab(cs.tiny_model(), ["abc", "abcd"], SamplingParams(max_tokens=3, ignore_eos=True),
                      mode="sequential", prefix_cache="radix")
    header, *lines = run.jsonl().splitlines()
    head = json.loads(header)
    head["tree_steps"][0]["tree"] = [{"id": "x"}]  # a node without its fields
    at = open_page(PAGE, "en")
    _upload(at, "\n".join([json.dumps(head), *lines]).encode(), "broken_tree.jsonl")
    assert any("tree_steps[0].tree[0]" in e.value for e in at.error)
    assert len(chart_specs(at)) >= 4  # the chain and the pool still draw


def test_the_block_cache_is_drawn_from_the_run():
    at = open_page(PAGE, "en")
    at.radio(key="lab_a_prefix_cache_en").set_value("block").run()
    assert at.number_input(key="lab_a_block_size").value == 64  # the block options appear with their defaults
    _run(at)
    titles = [json.dumps(s.get("layout", {}).get("title", "")) for s in chart_specs(at)]
    assert any("Block cache after" in x for x in titles) and not at.error


def test_a_trace_with_a_refused_request_shows_it_with_its_numbers():
    """An uploaded trace in which the engine refused a request (its peak over the budget) shows the refusal
    above the step views, and the step's pool events name it."""
    from kda_ref.trace import AdmissionRefused, dumps_event
    from model_viz.scenarios import engine_trace as et

    text = et.run_scenario((20, 12), token_budget=16)
    header, events = et.parse_trace(text)
    step = et.engine_steps(events)[1].step
    extra = AdmissionRefused(step=step, req_id=7, need_bytes=900_000, budget_bytes=800_000, free_bytes=700_000,
                             parts={"active KDA state slot": 224_256, "MLA KV pages of 16 tokens": 675_744},
                             message="memory_budget_bytes: request 7 cannot run under this configuration")
    head, *lines = text.splitlines()
    head = json.loads(head)
    head["num_events"] += 1
    at = open_page(PAGE, "en")
    _upload(at, "\n".join([json.dumps(head), *lines, dumps_event(extra)]).encode(), "refused.jsonl")
    warned = " ".join(w.value for w in at.warning)
    assert "Requests the engine finished with an error (1)" in warned and "900,000 B at its peak" in warned
    at.button(key="lab_next").click().run(timeout=120)
    assert "r7 **refused**" in " ".join(m.value for m in at.markdown)
