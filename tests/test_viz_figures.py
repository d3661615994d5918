"""State-evolution figures: one heatmap per head, a fixed colour range, the trace's own numbers."""

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from kda_ref.state_trace import KDAStateTrace
from model_viz.figures import state_evolution as sf
from model_viz.scenarios import state_evolution as sp
from model_viz.i18n import in_language

PROMPT = "abcab abcab"


@pytest.fixture(scope="module")
def trace():
    return sp.trace_prompt(sp.build_model(seed=0), PROMPT)  # the random tiny model: 4 heads


def _heatmaps(fig):
    return [d for d in fig.data if isinstance(d, go.Heatmap)]


def _synthetic_trace(T=5, H=2, K=128, V=128, seed=0) -> KDAStateTrace:
    """A trace with states larger than the heatmap limit (64), to exercise downsampling."""
    g = torch.Generator().manual_seed(seed)
    return KDAStateTrace(
        tokens=list(range(97, 97 + T)),
        layers=[0],
        states={0: torch.randn(T, H, K, V, generator=g)},
        gates={0: -torch.rand(T, H, K, generator=g)},
        beta={0: torch.rand(T, H, generator=g)},
        logits=torch.zeros(T, 259),
        keys={0: torch.randn(T, H, K, generator=g)},
        values={0: torch.randn(T, H, V, generator=g)},
    )


def test_one_heatmap_per_head(trace):
    layer = trace.layers[0]
    H = trace.states[layer].shape[1]
    fig = sf.state_heatmap_grid(trace, layer, 0)
    assert len(_heatmaps(fig)) == H == 4
    assert sum(1 for h in _heatmaps(fig) if h.showscale) == 1  # one shared colour bar


def test_color_range_is_fixed_across_tokens(trace):
    layer = trace.layers[1]
    T = len(trace.tokens)
    ranges = set()
    for t in (0, 3, T - 1):
        for h in _heatmaps(sf.state_heatmap_grid(trace, layer, t)):
            ranges.add((h.zmin, h.zmax))
    assert len(ranges) == 1
    zmin, zmax = ranges.pop()
    # symmetric around 0 and equal to the largest |S| anywhere in the trace (64 x 64: no downsampling)
    expected = float(trace.states[layer].abs().max())
    assert zmin == pytest.approx(-expected) and zmax == pytest.approx(expected)


def test_data_differs_between_tokens_and_equals_the_state(trace):
    layer = trace.layers[0]
    z3 = np.array([h.z for h in _heatmaps(sf.state_heatmap_grid(trace, layer, 3))])
    z4 = np.array([h.z for h in _heatmaps(sf.state_heatmap_grid(trace, layer, 4))])
    assert not np.allclose(z3, z4)
    np.testing.assert_allclose(z4, trace.states[layer][4].numpy(), rtol=0, atol=1e-7)


def test_delta_mode_shows_the_step_change(trace):
    layer = trace.layers[2]
    S = trace.states[layer]
    z0 = np.array([h.z for h in _heatmaps(sf.state_heatmap_grid(trace, layer, 0, delta=True))])
    z5 = np.array([h.z for h in _heatmaps(sf.state_heatmap_grid(trace, layer, 5, delta=True))])
    np.testing.assert_allclose(z0, S[0].numpy(), atol=1e-7)  # the state before token 0 is zero
    np.testing.assert_allclose(z5, (S[5] - S[4]).numpy(), atol=1e-6)
    # the delta view has its own fixed range, smaller than the state's
    assert _heatmaps(sf.state_heatmap_grid(trace, layer, 5, delta=True))[0].zmax <= float(S.abs().max())


def test_large_states_are_block_averaged_to_64():
    tr = _synthetic_trace(K=128, V=128)
    fig = sf.state_heatmap_grid(tr, 0, 2)
    hm = _heatmaps(fig)
    assert len(hm) == 2
    z = np.array(hm[1].z)
    assert z.shape == (64, 64)
    expected = tr.states[0][2, 1].reshape(64, 2, 64, 2).mean(dim=(1, 3)).numpy()  # 2x2 block means
    np.testing.assert_allclose(z, expected, atol=1e-6)
    # cells sit at the block centres, in original channel units
    assert hm[1].x[0] == pytest.approx(0.5) and hm[1].x[-1] == pytest.approx(126.5)
    # the fixed range is taken over what is shown (block means), over all tokens
    all_blocks = tr.states[0].reshape(5, 2, 64, 2, 64, 2).mean(dim=(3, 5))
    assert hm[0].zmax == pytest.approx(float(all_blocks.abs().max()), rel=1e-6)
    # small states pass through untouched
    small = torch.randn(3, 8, 16)
    assert torch.equal(sf.downsample(small), small)


def test_norm_figure_marks_the_current_token(trace):
    layer = trace.layers[0]
    t, H, T = 6, 4, len(trace.tokens)
    fig = sf.state_norm_figure(trace, layer, t)
    lines = [d for d in fig.data if d.mode == "lines"]
    assert len(lines) == 2 * H  # norm + write size, per head
    np.testing.assert_allclose(lines[1].y, trace.state_norms(layer)[:, 1].numpy(), rtol=1e-6)
    markers = [d for d in fig.data if d.mode == "markers"]
    assert len(markers) == 2 and all(list(m.x) == [t] * H for m in markers)
    np.testing.assert_allclose(markers[0].y, trace.state_norms(layer)[t].numpy(), rtol=1e-6)
    assert any(s.x0 == t and s.x1 == t for s in fig.layout.shapes)  # the vertical line
    assert list(fig.layout.xaxis2.ticktext) == sf.token_labels(trace.tokens)[:T]
    # moving the token moves the marker, not the curves
    fig2 = sf.state_norm_figure(trace, layer, t + 1)
    assert list(fig2.data[0].y) == list(fig.data[0].y)
    assert [d for d in fig2.data if d.mode == "markers"][0].x[0] == t + 1


def test_write_sizes_are_the_delta_rule_update(trace):
    layer = trace.layers[0]
    S, alpha = trace.states[layer], trace.gates[layer].exp()
    w = sf.write_sizes(trace, layer)
    assert w.shape == (len(trace.tokens), 4)
    torch.testing.assert_close(w[0], trace.state_norms(layer)[0])  # from a zero state
    by_hand = (S[3, 2] - alpha[3, 2][:, None] * S[2, 2]).norm()
    torch.testing.assert_close(w[3, 2], by_hand)


def test_gate_figure_shows_mean_alpha_and_beta_with_token_labels(trace):
    layer = trace.layers[1]
    fig = sf.gate_figure(trace, layer, 2)
    lines = [d for d in fig.data if d.mode == "lines"]
    assert len(lines) == 8
    np.testing.assert_allclose(lines[0].y, trace.gates[layer][:, 0].exp().mean(-1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(lines[4 + 3].y, trace.beta[layer][:, 3].numpy(), rtol=1e-6)
    assert all(0 < a <= 1 for a in lines[0].y)
    labels = sf.token_labels(trace.tokens)
    assert labels[0] == "<bos>" and labels[6] == "␣" and labels[1] == "a"
    assert list(fig.layout.xaxis2.ticktext) == labels
    assert fig.layout.xaxis2.title.text == "token"


def test_long_prompts_thin_the_tick_labels():
    tr = _synthetic_trace(T=200, H=1, K=4, V=4)
    fig = sf.gate_figure(tr, 0, 199)
    assert 10 < len(fig.layout.xaxis2.tickvals) <= 48


def test_figure_text_follows_the_language(trace):
    layer = trace.layers[0]
    en = in_language("en", sf.state_heatmap_grid, trace, layer, 1)
    zh = in_language("zh", sf.state_heatmap_grid, trace, layer, 1)
    assert "head 0" in [a.text for a in en.layout.annotations]
    assert "头 0" in [a.text for a in zh.layout.annotations]
    assert en.layout.title.text != zh.layout.title.text


def test_bad_layer_or_token_index_is_a_clear_error(trace):
    mla_layer = 3
    with pytest.raises(KeyError, match="not a KDA layer"):
        sf.state_heatmap_grid(trace, mla_layer, 0)
    with pytest.raises(IndexError, match="outside"):
        sf.state_norm_figure(trace, trace.layers[0], len(trace.tokens))


def test_recall_probe_on_the_trained_model():
    """The page's probe: for a recall prompt the readout for each query's vector jumps toward the
    value its pair wrote at the write token (layer 0, head 0 of the trained model); other prompts
    get no probe."""
    model = sp.build_model()
    tr = sp.trace_prompt(model, sp.DEFAULT_PROMPT)
    curves = sp.recall_probe(model, tr, tr.layers[0], 0)
    assert curves is not None and len(curves) == 4
    for c in curves:
        a, w = c["alignment"], c["write_pos"]
        assert a[w] - a[w - 1] > 0.3 and c["query_pos"] > w
    fig = sf.recall_probe_figure(curves, tr.tokens, 3)
    assert len([d for d in fig.data if d.mode == "lines"]) == 4 and tuple(fig.layout.yaxis.range) == (0, 1.05)
    plain = sp.trace_prompt(model, "no recall here")
    assert sp.recall_probe(model, plain, plain.layers[0], 0) is None and not sp.is_recall_prompt(plain)
