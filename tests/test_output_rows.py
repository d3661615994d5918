"""The last layer runs its MLP / MoE (and an MLA layer its queries) on the rows whose logits are read alone.

``HybridModel.forward_batch(..., keep_hidden=False)`` cuts the residual stream after the last layer's
attention to the rows the logits come from; every row's KV and recurrent state is still written. These
tests hold it to the uncut forward: the same logits, the same caches after the step, and the engine keeps
every row where a drafter reads the hidden states.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kda_ref import LLM, SamplingParams
from kda_ref.model import HybridModel, ModelConfig, RequestCache


def tokens(n, seed=0, vocab=256):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


def _kda_last(config: ModelConfig) -> ModelConfig:
    """``config`` with its layers reordered so that the last one is a KDA layer."""
    d = config.to_dict()
    n = d["num_hidden_layers"]
    d["linear_attn_config"].update(kda_layers=[i for i in range(1, n + 1) if i != 2], full_attn_layers=[2])
    return ModelConfig.from_dict(d)


CONFIGS = {"kimi_linear": ModelConfig.tiny, "k3": ModelConfig.k3_tiny, "kda_last": lambda: _kda_last(ModelConfig.tiny())}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model(request):
    return HybridModel(CONFIGS[request.param](), seed=0).eval()


def _two_caches(model):
    """Two identical caches holding three sequences: 39 and 50 tokens cached for sequences 0 and 2."""
    caches = []
    for _ in range(2):
        cache = RequestCache(model.config, 3, max_tokens=128)
        b = cache.batch([39, 50], seq_ids=[0, 2])
        model.forward_batch(torch.cat([tokens(39, 2), tokens(50, 4)]), b, cache.tensors)
        cache.advance(b, [0, 2])
        caches.append(cache)
    return caches


def _mixed_step(cache):
    """A decode (sequence 0), a fresh prefill of 70 (sequence 1) and an extend by 40 (sequence 2)."""
    ids = torch.cat([tokens(1, 5), tokens(70, 3), tokens(40, 6)])
    return ids, cache.batch([1, 70, 40])


@torch.no_grad()
@pytest.mark.parametrize("logits", ["last", "rows"])
def test_the_cut_forward_gives_the_uncut_logits_and_writes_the_same_caches(model, logits):
    if model.config.layer_types[-1] == "kda":
        assert model.config.layer_types == ["kda", "mla", "kda", "kda"]
    cut, whole = _two_caches(model)
    ids, b = _mixed_step(cut)
    # "rows": the rows a step with prompt logprobs reads -- a decode's, five of the prefill's, the extend's last
    want = "last" if logits == "last" else torch.tensor([0, 3, 4, 5, 6, 70, 110])
    a = model.forward_batch(ids, b, cut.tensors, logits=want, keep_hidden=False)
    ref = model.forward_batch(ids, _mixed_step(whole)[1], whole.tensors, logits=want, keep_hidden=True)
    rows = 3 if logits == "last" else 7
    assert a.logits.shape == ref.logits.shape == (rows, model.config.vocab_size)
    torch.testing.assert_close(a.logits, ref.logits, atol=1e-5, rtol=0)
    assert a.hidden.shape == (rows, model.config.hidden_size) and ref.hidden.shape[0] == ids.numel()
    for name in ("kv", "recurrent", "conv"):
        assert torch.equal(getattr(cut.tensors, name), getattr(whole.tensors, name)), name


@torch.no_grad()
def test_the_cut_forward_of_an_engine_step_continues_as_the_uncut_one(model):
    """Decoding on from caches the cut forward wrote gives the uncut model's logits (the MLA pages and the
    states of the rows past the cut are all there)."""
    cut, whole = _two_caches(model)
    ids, b = _mixed_step(cut)
    model.forward_batch(ids, b, cut.tensors, keep_hidden=False)
    model.forward_batch(ids, _mixed_step(whole)[1], whole.tensors, keep_hidden=True)
    for c in (cut, whole):
        c.advance(b)
    nxt = tokens(3, 9)
    out = [model.forward_batch(nxt, c.batch([1, 1, 1]), c.tensors, keep_hidden=True).logits for c in (cut, whole)]
    torch.testing.assert_close(out[0], out[1], atol=1e-5, rtol=0)
    # and the stateless model agrees with both
    full = model(torch.cat([tokens(50, 4), tokens(40, 6), nxt[2:]]))
    torch.testing.assert_close(out[0][2], full[-1], atol=1e-4, rtol=0)


def test_the_engine_cuts_unless_a_drafter_reads_the_hidden_states():
    from kda_ref.train import trained_path

    plain = LLM(trained_path("k3"), memory_budget_bytes=64 << 20)
    assert plain.runner.keep_hidden is False
    mtp = LLM(trained_path("k3"), memory_budget_bytes=64 << 20, speculative="mtp", num_speculative_tokens=2)
    assert mtp.runner.keep_hidden is True
    p = SamplingParams(max_tokens=8, temperature=0.0)
    prompt = [int(t) for t in tokens(40, 11, vocab=250)]
    assert plain.generate([prompt], p)[0].token_ids == mtp.generate([prompt], p)[0].token_ids


@torch.no_grad()
@pytest.mark.parametrize("block_size", [1, 3])
def test_k3s_stream_is_cut_when_the_last_layer_starts_a_block(block_size):
    """With attention residuals the last layer may start a block (its running sum banked, none left): the cut
    keeps the banked blocks' rows and the layer's attention output starts the new sum."""
    import dataclasses

    model = HybridModel(dataclasses.replace(ModelConfig.k3_tiny(), attn_res_block_size=block_size), seed=0).eval()
    assert (model.config.num_hidden_layers - 1) % block_size == 0
    ids = tokens(10, 7)
    torch.testing.assert_close(model(ids, logits="last")[0], model(ids, logits="all")[-1], atol=1e-5, rtol=0)


def test_padding_groups_at_most_double_a_groups_rows():
    from kda_ref.model.mla_layer import _padding_groups

    assert _padding_groups([128] * 8) == [list(range(8))]
    groups = _padding_groups([4] * 6 + [300])
    assert sorted(n for g in groups for n in g) == list(range(7)) and len(groups) == 2
    lens = [4] * 6 + [300]
    for g in groups:
        assert len(g) * max(lens[n] for n in g) <= 2 * sum(lens[n] for n in g)


@torch.no_grad()
@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.bfloat16])
def test_decodes_beside_a_long_prompt_and_a_cache_of_another_dtype(cache_dtype):
    """The last rows of short decodes and a long fresh prompt attend in groups (the torch path pads each group
    to its longest); a cache whose dtype is not the model's is read in the model's."""
    model = HybridModel(ModelConfig.tiny(), seed=0).eval()
    outs = []
    for keep in (True, False):
        cache = RequestCache(model.config, 4, max_tokens=256, dtype=cache_dtype)
        b = cache.batch([3, 3, 3], seq_ids=[0, 1, 2])
        model.forward_batch(tokens(9, 1), b, cache.tensors)
        cache.advance(b, [0, 1, 2])
        b = cache.batch([1, 1, 1, 200])
        outs.append(model.forward_batch(tokens(203, 2), b, cache.tensors, keep_hidden=keep).logits)
    tol = 1e-5 if cache_dtype == torch.float32 else 2e-3
    torch.testing.assert_close(outs[1], outs[0], atol=tol, rtol=0)


_MODELS: dict[str, HybridModel] = {}


def _model(name: str) -> HybridModel:
    if name not in _MODELS:
        _MODELS[name] = HybridModel(CONFIGS[name](), seed=0).eval()
    return _MODELS[name]


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(CONFIGS)), data=st.data())
def test_the_cut_on_random_batches(name, data):
    """Random steps -- each sequence fresh, continuing a cached context or decoding one token -- with the
    logits read at the last rows or at random rows: the cut forward gives the uncut logits and leaves the
    same caches."""
    model = _model(name)
    n = data.draw(st.integers(1, 4))
    ctx = data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    new = data.draw(st.lists(st.integers(1, 48), min_size=n, max_size=n))
    caches = []
    for _ in range(2):
        cache = RequestCache(model.config, n, max_tokens=96)
        cached = [i for i in range(n) if ctx[i]]
        if cached:
            b = cache.batch([ctx[i] for i in cached], seq_ids=cached)
            model.forward_batch(tokens(sum(ctx), 1), b, cache.tensors)
            cache.advance(b, cached)
        caches.append(cache)
    T = sum(new)
    if data.draw(st.booleans()):
        want = "last"
    else:
        want = torch.tensor(sorted(data.draw(st.sets(st.integers(0, T - 1), min_size=1, max_size=min(T, 6)))))
    ids = tokens(T, 2)
    with torch.no_grad():
        cut, whole = (model.forward_batch(ids, c.batch(new), c.tensors, logits=want, keep_hidden=keep)
                      for c, keep in zip(caches, (False, True)))
    torch.testing.assert_close(cut.logits, whole.logits, atol=1e-5, rtol=0)
    for field in ("kv", "recurrent", "conv"):
        assert torch.equal(getattr(caches[0].tensors, field), getattr(caches[1].tensors, field)), field
