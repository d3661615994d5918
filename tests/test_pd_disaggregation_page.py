"""The "Disaggregation" page: the stages of one handoff, the manifest, the bytes, the refused handoffs."""

import pytest

from model_viz.figures import pd_disaggregation as pd_fig
from model_viz.scenarios import pd_disaggregation as pd
from model_viz.i18n import in_language


@pytest.fixture(scope="module")
def view():
    return pd.run()


def test_the_handoff_is_three_kinds_at_one_boundary(view):
    m = view.manifest
    assert m.boundary == view.prompt_len == 201 and {r.boundary for r in m.regions} == {201}
    kinds = m.bytes_by_kind()
    assert kinds["kv"] > 0 and kinds["state"] > kinds["conv"] > 0 and m.total_bytes == sum(kinds.values())
    assert view.pools_empty_after and len(view.tokens) == pd.NEW_TOKENS and view.tokens[0] == view.first_token
    table = in_language("en", pd_fig.manifest_table, view)
    assert len(table.data[0].cells.values[0]) == len(m.regions)


@pytest.mark.parametrize("mode,why", [("boundary", "different boundaries"), ("kv_only", "regions: missing")])
def test_broken_handoffs_are_refused_and_would_have_diverged(mode, why):
    b = pd.break_it(mode)
    assert why in b.refusal
    assert b.first_divergence is not None and b.unchecked[:b.first_divergence] == b.reference[:b.first_divergence]
    with pytest.raises(ValueError, match="mode"):
        pd.break_it("wrong")


def test_the_kv_leaves_per_chunk_and_the_states_once(view):
    sends = view.sends
    assert len(sends) >= 3 and [s["last"] for s in sends] == [False] * (len(sends) - 1) + [True]
    assert all(s["state"] == s["conv"] == 0 for s in sends[:-1])  # no state before the boundary is final
    kinds = view.manifest.bytes_by_kind()
    assert sends[-1]["state"] == kinds["state"] and sends[-1]["conv"] == kinds["conv"]
    assert sum(s["kv"] for s in sends) == kinds["kv"]  # every row sent exactly once
    assert [s["rows"] for s in sends][-1][1] == view.prompt_len
    assert all(a["rows"][1] == b["rows"][0] for a, b in zip(sends, sends[1:]))  # contiguous row ranges
    table = in_language("zh", pd_fig.sends_table, view)
    assert len(table.data[0].cells.values[0]) == len(sends) and "最后" in table.data[0].cells.values[1][-1]


def test_figures(view):
    st = in_language("zh", pd_fig.stage_figure, view, 2)
    assert "3/5" in st.layout.title.text
    bars = in_language("en", pd_fig.bytes_figure, pd.volume())
    state48 = [tr for tr in bars.data if tr.name == "KDA state"][1]
    assert set(state48.y) == {40.0}  # MiB, the same at every prompt length


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_steps_and_breaks(lang):
    pytest.importorskip("streamlit")
    from apptest_util import chart_specs, open_page

    at = open_page("app_pages/pd_disaggregation.py", lang, timeout=180)
    assert len(chart_specs(at)) == 4
    at.button(key="pd_disaggregation_next").click().run()
    assert not at.exception and at.session_state["pd_disaggregation_stage"] == 2  # shown from 1
    at.toggle(key="pd_disaggregation_break").set_value(True).run()
    assert not at.exception
    labels = [e.label for e in at.expander]
    assert all(any(cid in lab for lab in labels) for cid in pd_fig.PAGE_CONCEPTS)
    text = " ".join(m.value for m in at.markdown)
    assert ("refuses it" in text) if lang == "en" else ("拒绝了它" in text)
    at.toggle(key="pd_disaggregation_break").set_value(False).run()
    for _ in range(3):  # to the last stage: decode, and the pools after it, said in words
        at.button(key="pd_disaggregation_next").click().run()
    text = " ".join(m.value for m in at.markdown)
    assert at.session_state["pd_disaggregation_stage"] == 5 and "True" not in text
    assert ("both pools are empty afterwards" in text) if lang == "en" else ("之后两个内存池都为空" in text)
