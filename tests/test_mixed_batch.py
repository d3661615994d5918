"""A step mixing decodes and prefill chunks: one chunk-kernel call (SGLang / vLLM) or a split.

SGLang runs a MIXED batch through ``forward_extend`` (the chunk kernel over every token, each
sequence from its own state); vLLM's KDA layer takes the chunk path for all non-speculative tokens
when ``num_prefills > 0``. ``mixed_batch="chunk"`` (the default) does the same; ``"split"`` sends
the decodes to the recurrent kernel. The trace shows which kernels ran; the answers are the same.
"""

from __future__ import annotations

import pytest
import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.model import HybridModel
from kda_ref.trace import TraceRecorder

CFG = ModelConfig.micro()


@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=3).eval()


def _run(model, policy: str):
    rec = TraceRecorder()
    llm = LLM(model, tracer=rec, max_num_batched_tokens=24, mixed_batch=policy)
    params = SamplingParams(max_tokens=6, ignore_eos=True, return_logits=True)
    llm.add_request(list(range(1, 9)), params)  # short: decoding while the long one prefills
    llm.add_request(list(range(20, 90)), params)  # 70 tokens: three prefill chunks
    outs = {}
    while llm.has_unfinished():
        outs.update({o.req_id: o for o in llm.step()})
    return rec, [outs[0], outs[1]]


def test_a_mixed_step_runs_one_chunk_kernel_by_default(model):
    rec, _ = _run(model, "chunk")
    layer0 = CFG.kda_layer_ids[0]
    mixed = [e for e in rec.events_of("batch_composition") if 1 in
             [b - a for a, b in zip(e.cu_seqlens, e.cu_seqlens[1:])] and max(
                 b - a for a, b in zip(e.cu_seqlens, e.cu_seqlens[1:])) > 1]
    assert mixed, "the scenario must produce a step with a decode and a prefill chunk"
    for e in mixed:
        calls = [d for d in rec.events_of("kernel_dispatch") if d.step == e.step and d.layer == layer0]
        assert [(d.kernel, d.num_seqs, d.num_tokens) for d in calls] == [("chunk_kda", 2, e.num_tokens)]
        assert sorted(e.phases) == ["decode", "extend"]  # the decode runs as a one-token sequence of the chunk call


def test_split_sends_the_decode_to_the_recurrent_kernel(model):
    rec, _ = _run(model, "split")
    layer0 = CFG.kda_layer_ids[0]
    mixed = [e for e in rec.events_of("batch_composition") if "decode" in e.phases and "extend" in e.phases]
    assert mixed
    for e in mixed:
        calls = sorted((d.kernel, d.num_seqs) for d in rec.events_of("kernel_dispatch")
                       if d.step == e.step and d.layer == layer0)
        assert calls == [("chunk_kda", 1), ("fused_recurrent_kda", 1)]


def test_both_policies_give_the_same_answers(model):
    _, chunk = _run(model, "chunk")
    _, split = _run(model, "split")
    for a, b in zip(chunk, split):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=0)
    alone = LLM(model).generate([list(range(20, 90))], SamplingParams(max_tokens=6, ignore_eos=True))[0]
    assert chunk[1].token_ids == alone.token_ids


def test_a_bad_policy_is_refused():
    with pytest.raises(ValueError, match="^mixed_batch: must be one of"):
        LLM(CFG, mixed_batch="fused")
