"""The last layer runs its MLP / MoE (and an MLA layer its queries) on the rows whose logits are read alone.

``HybridModel.forward_batch(..., keep_hidden=False)`` cuts the residual stream after the last layer's
attention to the rows the logits come from; every row's KV and recurrent state is still written. These
tests hold it to the uncut forward: the same logits, the same caches after the step, and the engine keeps
every row where a drafter reads the hidden states.
"""

from __future__ import annotations

import pytest
import torch

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
