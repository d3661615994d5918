"""The "Context parallelism" page: the maps, the scan against the wrong ways, the bytes."""

import pytest

from model_viz.figures import context_parallel as cp_fig
from model_viz.scenarios import context_parallel as cp
from model_viz.i18n import in_language


@pytest.fixture(scope="module")
def view3():
    return cp.run(3)


def test_the_scan_is_exact_and_the_wrong_ways_are_not(view3):
    v = view3
    assert v.ranks == 3 and [b[1] - b[0] for b in v.bounds] == [121, 122, 122] and v.bounds[-1][1] == v.tokens
    assert max(v.state_error["scan"]) < 1e-10 and v.final_error["scan"] < 1e-10
    assert v.state_error["zero"][1:] == [1.0, 1.0]  # a zero state is 100% off
    assert v.state_error["add"][1] < 1e-10 < 0.1 < v.state_error["add"][2]  # exact only with one earlier rank
    assert v.logits_diff["scan"] < 1e-4 < 1e-2 < min(v.logits_diff["zero"], v.logits_diff["add"])
    assert v.sent_bytes > 0 and all(a.shape == (64, 64) for a in v.A)


def test_figures(view3):
    maps = in_language("en", cp_fig.maps_figure, view3)
    assert len(maps.data) == 2 * 3 and "rank 2: A (tokens 243-365)" in [a.text for a in maps.layout.annotations]
    inc = in_language("zh", cp_fig.incoming_figure, view3, 2)
    assert len(inc.data) == 3 and "243" in inc.layout.title.text
    bars = in_language("en", cp_fig.logits_figure, view3)
    assert list(bars.data[0].x) == ["prefix scan", "every rank from zero", "states added"]
    vol = in_language("en", cp_fig.volume_figure, cp.volume())
    flat = [tr for tr in vol.data if tr.name == "KDA maps"]
    assert len(flat) == 2 and len(set(flat[1].y)) == 1  # 48B: the maps do not grow with the prompt
    assert flat[1].y[0] == 80.0  # MiB: 20 layers x 32 heads x 128 x 256 x 4 B
    # each quantity one colour in both panels (the legend, drawn for the first, names the second's lines too)
    by_name = {}
    for tr in vol.data:
        by_name.setdefault(tr.name, set()).add(tr.line.color)
    assert len(by_name) == 4 and all(len(c) == 1 and None not in c for c in by_name.values())


def test_bad_rank_count_is_named():
    with pytest.raises(ValueError, match="ranks"):
        cp.run(5)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_steps_through_the_ranks(lang):
    pytest.importorskip("streamlit")
    from apptest_util import chart_specs, open_page

    at = open_page("app_pages/context_parallel.py", lang, timeout=180)
    assert len(chart_specs(at)) == 4
    at.button(key="context_parallel_next").click().run()
    assert not at.exception and at.session_state["context_parallel_rank"] == 1
    labels = [e.label for e in at.expander]
    assert all(any(cid in lab for lab in labels) for cid in cp_fig.PAGE_CONCEPTS)
    text = " ".join(m.value for m in at.markdown)
    assert ("relative error" in text) if lang == "en" else ("相对误差" in text)
    at.select_slider(key="context_parallel_ranks").set_value(2).run()
    assert not at.exception


def test_the_page_points_at_a_rank_where_the_sum_is_wrong(view3):
    """The "states do not add" bullet sends the reader to a rank; there the sum must be far off (at rank 1
    it is rank 0's state itself, exact), in both languages."""
    import re

    from model_viz.i18n import t

    for lang, pattern in (("en", r"step to rank (\d)"), ("zh", r"切换到 rank (\d)")):
        r = int(re.search(pattern, t("context_parallel.watch", lang)).group(1))
        assert view3.state_error["add"][r] > 0.1, (lang, r)
    assert view3.state_error["add"][1] < 1e-10
