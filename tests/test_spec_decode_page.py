"""The "Speculative decoding" page: the engine's verify steps under every rollback strategy, their
storage, RecoverSSM's closed form term by term, and the deliberately wrong KV-style rollback."""

import pytest

from model_viz.figures import spec_decode as sd_fig
from model_viz.scenarios import spec_decode as sd
from model_viz.i18n import in_language


@pytest.fixture(scope="module")
def run4():
    return sd.run(4)


def test_the_strategies_agree_and_the_steps_add_up(run4):
    assert len(run4.tokens) == sd.MAX_TOKENS and run4.steps
    # the prefill emits the first token, every verify step its kept tokens, a step without drafts one
    plain_decodes = run4.spec_steps - 1 - len(run4.steps)
    assert 1 + sum(s.kept for s in run4.steps) + plain_decodes == len(run4.tokens)
    assert all(1 <= s.kept <= s.num_accepted + 1 <= len(s.drafts) + 1 for s in run4.steps)
    assert run4.spec_steps < run4.plain_steps and set(run4.per_strategy_steps.values()) == {run4.spec_steps}
    assert run4.mean_accepted_length > 2  # the repeated table is easy to draft


def test_rollback_bytes_follow_the_strategies(run4):
    b = run4.rollback_bytes
    assert b["per_step"] == b["slots"] == 5 * run4.state_bytes  # one request: 1 + k states
    assert b["replay"] == 5 * run4.record_bytes and b["replay"] < run4.state_bytes
    big = run4.bytes_48b
    assert big["per_step"] == 5 * 43_417_600 and big["replay"] < big["per_step"] / 20
    from kda_ref.model import ModelConfig
    from kda_ref.speculative.recoverssm import correction_record_bytes

    assert b["recoverssm"] == 5 * correction_record_bytes(sd.page_model().config) < run4.state_bytes
    k3 = run4.bytes_k3  # one K3 state is 69 layers x 96 heads x 128 x 128 fp32 plus the conv windows
    assert k3["slots"] == 5 * ModelConfig.kimi_k3().state_bytes()["kda_per_seq"] > 2**30
    assert k3["recoverssm"] < k3["slots"] / 20


def test_recoverssms_closed_form_is_drawn_for_every_verify_step(run4):
    """One commit per verify step, its terms one per kept token, and the closed form equal to the serial fold
    of the same corrections; the figure draws the decayed start and every term."""
    assert len(run4.closed_forms) == len(run4.steps)
    for c, s in zip(run4.closed_forms, run4.steps):
        assert c.kept == s.kept == len(c.term_norms) == len(c.decay_after)
        assert c.serial_gap <= 1e-4 * max(1.0, c.final_norm)
        assert all(0 < d <= 1 for d in c.decay_after) and c.decay_after[-1] == 1.0  # nothing decays after the last
        assert c.decayed_norm <= c.start_norm + 1e-6  # the gates only shrink the committed state
    i = max(range(len(run4.steps)), key=lambda n: run4.steps[n].kept)
    fig = in_language("en", sd_fig.closed_form_figure, run4, i)
    assert len(fig.data[0].y) == run4.steps[i].kept + 1 and f"{run4.steps[i].kept} kept tokens" in fig.layout.title.text
    table = in_language("zh", sd_fig.strategy_table, run4)
    assert list(table.data[0].cells.values[0]) == [sd_fig.lane_label(n) for n in sd_fig.STRATEGIES]
    assert all("vLLM" in lab for lab in table.data[0].cells.values[0][1::2])  # slots, recoverssm


def test_kv_style_rollback_moves_the_logits_at_the_first_wrong_state(run4):
    broken = sd.run_broken(4)
    r = broken.first_rejection
    assert r is not None and max(broken.drift[:r]) < 1e-4 and broken.drift[r] > 1e-3
    assert broken.tokens[:r] == broken.reference[:r]
    assert broken.diverged and broken.first_divergence >= r


def test_bad_k_is_named():
    with pytest.raises(ValueError, match="k: must be one of"):
        sd.run(9)
    with pytest.raises(ValueError, match="k: must be one of"):
        sd.run_broken(0)


def test_the_verify_figure_marks_accepted_and_rejected(run4):
    i = next(n for n, s in enumerate(run4.steps) if s.num_accepted < len(s.drafts))  # a step with a rejection
    fig = in_language("en", sd_fig.verify_figure, run4, i)
    s = run4.steps[i]
    fills = [sh.fillcolor for sh in fig.layout.shapes]
    assert fills.count(sd_fig.BAD) == len(s.drafts) - s.num_accepted
    assert fills.count(sd_fig.OK) >= s.num_accepted + 2  # accepted drafts, the per_step and slots pick
    assert f"{s.num_accepted} accepted" in fig.layout.title.text


def test_every_lane_comes_from_the_registry_and_a_strategy_without_a_translated_line_shows_its_own(monkeypatch):
    from kda_ref.speculative import SPEC_STATES, STRATEGIES

    assert sd_fig.STRATEGIES == SPEC_STATES and set(sd_fig.STRATEGY_TEXT) <= set(SPEC_STATES)
    assert in_language("zh", sd_fig.strategy_text, "recoverssm") != in_language("en", sd_fig.strategy_text, "recoverssm")
    monkeypatch.delitem(sd_fig.STRATEGY_TEXT, "recoverssm")
    assert in_language("zh", sd_fig.strategy_text, "recoverssm") == sd.LANES["recoverssm"].summary
    assert sd.lane_symbol("recoverssm", 2) == "u2" and sd.slots_held("slots", 4) == 5 == 1 + 4
    # a strategy registered elsewhere (the engine's strategies carry no page text) still gets a lane
    from kda_ref.speculative import rollback

    class CopyEachStep(rollback.PerStepStates):
        name = "copy_each_step"

    class Inputs(rollback.ReplaySSM):
        name = "inputs_again"

    for custom in (CopyEachStep(), Inputs()):
        monkeypatch.setitem(STRATEGIES, custom.name, custom)
    assert sd.lane_label("copy_each_step") == "copy_each_step" and sd.lane_symbol("copy_each_step", 1) == "S1"
    assert sd.lane_symbol("inputs_again", 2) == "r2" and "record per token" in sd.summary("inputs_again")
    assert [sd.lane_keeps("copy_each_step", t, 2) for t in range(4)] == [False, False, True, False]
    assert [sd.lane_keeps("inputs_again", t, 2) for t in range(4)] == [True, True, True, False]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_steps_and_breaks(lang):
    pytest.importorskip("streamlit")
    from apptest_util import chart_specs, open_page

    at = open_page("app_pages/spec_decode.py", lang, timeout=180)
    assert len(chart_specs(at)) == 6  # verify, closed form, bytes, strategies, static rows per step, the bucket table
    at.button(key="spec_decode_next").click().run()
    assert not at.exception and at.session_state["spec_decode_step"] == 2  # shown from 1
    at.toggle(key="spec_decode_break").set_value(True).run()
    assert not at.exception and len(chart_specs(at)) == 7
    labels = [e.label for e in at.expander]
    assert all(any(cid in lab for lab in labels) for cid in sd_fig.PAGE_CONCEPTS)
    text = " ".join(m.value for m in at.markdown)
    assert ("logits jump" in text) if lang == "en" else ("logits 突变" in text)


@pytest.fixture(scope="module")
def static3():
    return sd.static_view(3)


def test_the_static_view_shows_buckets_shrinking_and_pad_rows(static3):
    v = static3
    assert v.pad_units_untouched and v.sizes == (1, 2, 4, 8)
    assert [(s.bucket, s.num_seqs) for s in v.steps][:4] == [(4, 3), (4, 3), (4, 3), (2, 2)]
    for s in v.steps:
        assert s.state_indices[s.num_seqs:] == [-1] * (s.bucket - s.num_seqs)
        assert all(x >= 1 for x in s.state_indices[:s.num_seqs])
    fig = in_language("en", sd_fig.bucket_table, v, 0)
    cells = fig.data[0].cells.values
    assert cells[1] == ["live", "live", "live", "PAD"] and cells[2][3] == -1
    bars = in_language("zh", sd_fig.bucket_steps_figure, v)
    assert list(bars.data[1].y)[:4] == [1, 1, 1, 0]  # PAD rows per step
    with pytest.raises(ValueError, match="num_requests"):
        sd.static_view(9)


def test_page_static_view_follows_the_request_count():
    pytest.importorskip("streamlit")
    from apptest_util import open_page

    at = open_page("app_pages/spec_decode.py", "en", timeout=180)
    at.select_slider(key="spec_decode_static_n").set_value(5).run()
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "5 live rows ran as a bucket of 8: 3 PAD rows" in text
