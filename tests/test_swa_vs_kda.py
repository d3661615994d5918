"""The "SWA vs KDA" page (docs/article.md 9.1): an SWA window is cut out of any longer cached KV at
any position; a KDA state exists only at a checkpoint, and the engine's match backs off to one."""

import pytest
from apptest_util import chart_specs, open_page

from model_viz.figures import swa_vs_kda as sw_fig
from model_viz.scenarios import common as cs
from model_viz.scenarios import swa_vs_kda as sw
from model_viz.i18n import in_language


def test_dense_checkpoints_back_off_to_the_chunk_boundary_below_t():
    v = sw.run("chunk", 32, 56)
    assert v.checkpoints[:6] == [16, 32, 48, 64, 80, 96]  # every chunk boundary of A's path
    assert v.restore_at == 48 and v.recompute == 8 and v.kv_hit == 56 and not v.kda_exact
    assert v.swa_ok and v.window_rows == (24, 56) and v.swa_row_diff <= sw.SAME_TOL
    assert v.later[0] == 64 and v.later_diff > 0.05  # the state after 64 tokens is not the one after 56
    exact = sw.run("chunk", 32, 64)
    assert exact.kda_exact and exact.recompute == 0


def test_sglang_tracks_one_state_per_prefill_step_and_keeps_kv_up_to_it():
    v = sw.run("sglang", 16, 56)
    # steps [0, 40), [40, 80), [80, 100): the last chunk-aligned position of each, counted from the step's start
    assert v.checkpoints == [32, 72, 96]
    assert v.restore_at == 32 and v.recompute == 24
    assert v.cached_len == 96  # the finished request's KV is kept up to the donated tracked state
    past = sw.run("sglang", 16, 100)
    assert not past.swa_ok and past.kv_hit == 96 and past.restore_at == 96


def test_branch_policy_has_no_state_inside_the_prompt():
    v = sw.run("branch", 8, 40)
    assert v.restore_at == 0 and v.recompute == 40 and v.swa_ok and v.later
    assert min(v.checkpoints) > sw.PROMPT_LEN  # only A's end state


@pytest.mark.parametrize("window", sw.WINDOWS)
def test_the_swa_window_is_clipped_at_the_start(window):
    v = sw.run("chunk", window, 10)
    assert v.window_rows == (max(0, 10 - window), 10) and v.swa_ok


def test_recompute_sweep_matches_the_engine_at_every_checked_position():
    v = sw.run("sglang", 32, 56)
    d = sw_fig.restore_at_each_position(v)
    for t in (1, 31, 32, 33, 71, 72, 80, 96):
        assert d["kda"][t - 1] == sw.run("sglang", 32, t).recompute
    assert d["swa"][95] == 0 and d["swa"][96] is None  # t = 97 > the 96 cached rows


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="policy"):
        sw.run("every_n", 32, 10)
    with pytest.raises(ValueError, match="window"):
        sw.run("chunk", 0, 10)
    with pytest.raises(ValueError, match="t: must be"):
        sw.run("chunk", 32, sw.PROMPT_LEN + 1)


def test_verdicts_use_the_engine_numbers():
    v = sw.run("chunk", 32, 56)
    en, zh = in_language("en", sw_fig.verdicts, v), in_language("zh", sw_fig.verdicts, v)
    assert "c = 48" in en["kda"] and "8 tokens" in en["kda"] and "64" in en["kda"]
    assert "24 to 55" in en["swa"] and "24 到 55" in zh["swa"]
    fig = in_language("en", sw_fig.timeline_figure, v)
    names = {d.name for d in fig.data if d.name}
    assert {"checkpoint restored", "earlier checkpoints", "later checkpoints (unusable)"} <= names


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_follows_the_controls(lang):
    pytest.importorskip("streamlit")
    at = open_page("app_pages/swa_vs_kda.py", lang)
    assert at.title[0].value == ("Why SWA checkpointing does not carry over to KDA" if lang == "en"
                                 else "为什么 SWA 的 checkpoint 方法不能用于 KDA")
    at.radio(key=f"swa_vs_kda_policy_{lang}").set_value("chunk").run()
    at.slider(key="swa_vs_kda_t").set_value(70).run()
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "c = 64" in text and ("6 tokens" in text if lang == "en" else "6 个 token" in text)
    specs = chart_specs(at)
    assert len(specs) == 2
    sweep = specs[1]["data"][0]
    assert sweep["y"][69] == 6 and sweep["y"][63] == 0
    labels = [e.label for e in at.expander]
    assert all(any(cid in lab for lab in labels) for cid in sw_fig.PAGE_CONCEPTS)
    at.select_slider(key="swa_vs_kda_window").set_value(8).run()
    assert "62" in " ".join(m.value for m in at.markdown)  # rows 62 to 69
    assert cs.CHUNK == 16
