"""The concept-to-source map page: rows are the concept map, the filter narrows, the reading order
steps and only names existing concepts."""

import pathlib

import pytest

pytest.importorskip("streamlit")

from apptest_util import new_app  # noqa: E402
from model_viz.figures import concept_map as cp  # noqa: E402
from model_viz import concepts  # noqa: E402
from model_viz.i18n import in_language

APP = str(pathlib.Path(__file__).resolve().parents[1] / "app.py")
PAGE = "app_pages/concept_map.py"


def test_rows_are_the_concept_map_and_the_filter_narrows():
    rows = in_language("en", cp.concept_rows)
    assert [r["id"] for r in rows] == list(concepts.CONCEPTS)
    radix = in_language("en", cp.concept_rows, "RADIX")
    assert radix and len(radix) < len(rows) and all("radix" in " ".join(map(str, r.values())).lower() for r in radix)
    assert in_language("zh", cp.concept_rows, "no such thing anywhere") == []
    assert in_language("zh", cp.concept_rows)[0]["title"] == concepts.get(rows[0]["id"]).title["zh"]


def test_reading_order_names_existing_concepts_and_covers_the_engine():
    ids = [cid for _, step in cp.READING_ORDER for cid in step]
    assert all(cid in concepts.CONCEPTS for cid in ids) and len(set(ids)) == len(ids)
    assert "sglang.radix.match_backoff" in ids and "kda.recurrence" == ids[0]
    md = in_language("en", cp.reading_step_markdown, 99)  # clamped to the last step
    assert md.startswith(f"### {len(cp.READING_ORDER)}.") and "spec.mtp" in md
    assert set(ids) == set(concepts.CONCEPTS), "every concept has its place in the reading order"
    # the one-concept view shows every pointer with the commit it was read at
    detail = in_language("en", cp.concept_detail_markdown, "vllm.retention")
    ref = concepts.get("vllm.retention").vllm
    assert ref.commit[:8] in detail and ref.url() in detail


def _page():
    at = new_app(APP, 60).run()
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    return at


def test_page_steps_filters_and_switches_language():
    at = _page()
    assert at.title[0].value == "Concept-to-source map"
    first = " ".join(m.value for m in at.markdown)
    at.button(key="concept_map_next").click().run()
    assert at.session_state["concept_map_step"] == 2  # the slider counts from 1, as the headings
    second = " ".join(m.value for m in at.markdown)
    assert first != second and "sglang.kda_dispatcher" in second
    at.selectbox(key="concept_map_detail").set_value("vllm.retention").run()
    assert any("MambaManager.reachable_block_mask" in m.value for m in at.markdown)
    at.text_input(key="concept_map_filter").input("zzz-nothing").run()
    assert at.info and not at.exception
    at.sidebar.radio[0].set_value("zh").run()
    assert at.title[0].value == "概念与源码对照表"
