"""``state.not_an_archive``: the recurrence inverted step by step (kda_ref.state_trace), and the state
page's control that shows how far back it gets."""

import math

import pytest
import torch
from apptest_util import chart_specs, open_page

from kda_ref import state_trace as ins
from kda_ref.ops import l2norm, recurrent_kda

H, K, V = 2, 8, 8


def _inputs(T, *, seed=0, g_scale=0.1, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    k = l2norm(torch.randn(1, T, H, K, generator=gen, dtype=dtype))
    v = torch.randn(1, T, H, V, generator=gen, dtype=dtype)
    g = -g_scale * torch.rand(1, T, H, K, generator=gen, dtype=dtype)  # alpha in (exp(-g_scale), 1]
    beta = 0.1 + 0.8 * torch.rand(1, T, H, generator=gen, dtype=dtype)
    return k, v, g, beta


def _trace(k, v, g, beta) -> ins.KDAStateTrace:
    """A one-layer KDAStateTrace of the reference recurrence over these inputs."""
    _, _, steps = recurrent_kda(k, k, v, g, beta, return_step_states=True)
    T = k.shape[1]
    return ins.KDAStateTrace(tokens=list(range(T)), layers=[0], states={0: steps[0]}, gates={0: g[0]},
                             beta={0: beta[0]}, logits=torch.zeros(T, 1), keys={0: k[0]}, values={0: v[0]})


def test_invert_step_undoes_one_step_of_the_reference():
    k, v, g, beta = _inputs(1)
    S0 = torch.randn(1, H, K, V, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    _, S1 = recurrent_kda(k, k, v, g, beta, initial_state=S0, output_final_state=True)
    back = ins.invert_step(S1[0], k[0, 0], v[0, 0], g[0, 0], beta[0, 0])
    torch.testing.assert_close(back, S0[0], rtol=0, atol=1e-12)
    # the inverse is exact for keys that are not unit length too (Sherman-Morrison uses |k|^2)
    k2 = 0.5 * k
    _, S1 = recurrent_kda(k2, k2, v, g, beta, initial_state=S0, output_final_state=True)
    torch.testing.assert_close(ins.invert_step(S1[0], k2[0, 0], v[0, 0], g[0, 0], beta[0, 0]), S0[0],
                               rtol=0, atol=1e-12)


def test_mild_decay_in_fp64_goes_all_the_way_back():
    tr = _trace(*_inputs(12, g_scale=0.05))
    rec = ins.recover_backwards(tr, 0, t=11, steps=11, dtype=torch.float64)
    assert rec.shape == (11, H, K, V)
    truth = tr.states[0][:11].flip(0)  # after tokens 10, 9, ..., 0
    torch.testing.assert_close(rec, truth, rtol=0, atol=1e-9)


def test_one_hard_decay_destroys_what_came_before_it():
    """A single token that decays one channel by e^-40 (below fp64's rounding unit relative to the
    rest): undoing it divides that channel's rounding error by e^-40 and the recovery is garbage,
    while the same inputs without that decay recover."""
    k, v, g, beta = _inputs(6, g_scale=0.05, seed=1)
    soft = ins.recovery_curve(_trace(k, v, g, beta), 0, t=5, steps=5)
    g_hard = g.clone()
    g_hard[0, 3, 0, 2] = -40.0  # token 3, head 0, channel 2
    hard = ins.recovery_curve(_trace(k, v, g_hard, beta), 0, t=5, steps=5)
    assert max(soft.rel_error["float64"]) < 1e-8
    # steps 1, 2 undo tokens 5 and 4: still fine; step 3 undoes token 3's decay
    assert max(hard.rel_error["float64"][:2]) < 1e-8
    assert hard.rel_error["float64"][2] > 1.0 and hard.rel_error["float32"][2] > 1.0
    assert hard.log10_decay_min[2] == pytest.approx(-40 / math.log(10), abs=0.1)
    assert hard.log10_decay_median[2] > -1


def test_the_trained_model_forgets_faster_than_fp32_can_undo():
    """On the shipped model the probe's keys and values replay the recorded states, and running the
    last state back fails within a few tokens in fp32 (some channel decays by more than fp32 can
    resolve), reaching fewer tokens back than fp64."""
    from model_viz.scenarios import state_evolution as sp

    tr = sp.trace_prompt(sp.build_model(), sp.DEFAULT_PROMPT)
    T = len(tr.tokens)
    for layer in tr.layers:
        # the recorded k / v / g / beta are the ones the kernels used: replaying them gives the states
        torch.testing.assert_close(ins.forward_states(tr, layer).float(), tr.states[layer], rtol=1e-4, atol=1e-5)
        curve = sp.recovery(tr, layer, T - 1, 99)
        assert len(curve.steps) == sp.MAX_RECOVERY_STEPS
        from model_viz.figures.state_evolution import recovery_reach

        reach = recovery_reach(curve)
        assert reach["fp32"] <= reach["fp64"] < sp.MAX_RECOVERY_STEPS
        assert float(reach["decay1"]) == pytest.approx(10 ** curve.log10_decay_min[0], rel=0.05)  # alpha, not 1e-0
        assert curve.log10_decay_min[-1] < -7  # some channel's content is below fp32's rounding unit
    assert sp.recovery(tr, tr.layers[0], 0, 5) is None  # before token 0 there is only the zero state


def test_bad_arguments_are_named():
    tr = _trace(*_inputs(4))
    with pytest.raises(ValueError, match="layer: 3"):
        ins.recover_backwards(tr, 3, 2, 1)
    with pytest.raises(ValueError, match="t: position 4"):
        ins.recover_backwards(tr, 0, 4, 1)
    with pytest.raises(ValueError, match="steps: must be in 1..t=2"):
        ins.recover_backwards(tr, 0, 2, 3)
    with pytest.raises(ValueError, match="steps"):
        ins.recovery_curve(tr, 0, 2, 0)


def _recovery_spec(at):
    for spec in chart_specs(at):
        if "backwards" in spec["layout"]["title"]["text"] or "往回推" in spec["layout"]["title"]["text"]:
            return spec
    return None


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_state_page_runs_the_state_backwards(lang):
    pytest.importorskip("streamlit")
    at = open_page("app_pages/state_evolution.py", lang)
    assert _recovery_spec(at) is None and at.info  # token 0: nothing to undo
    at.slider(key="state_evolution_step").set_value(12).run()
    assert not at.exception
    spec = _recovery_spec(at)
    assert spec is not None and len(spec["data"][0]["x"]) == 8  # the default: 8 tokens back
    at.slider(key="state_evolution_archive_steps").set_value(3).run()
    spec = _recovery_spec(at)
    assert spec["data"][0]["x"] == [1, 2, 3]
    from model_viz.scenarios import state_evolution as sp

    curve = sp.recovery(sp.trace_prompt(sp.build_model(), sp.DEFAULT_PROMPT), 0, 12, 3)
    assert spec["data"][0]["y"] == pytest.approx([min(e, 1e30) for e in curve.rel_error["float32"]])
    text = " ".join(m.value for m in at.markdown)
    assert ("fp32" in text and ("recovers" in text if lang == "en" else "恢复" in text))
