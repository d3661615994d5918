"""A plain decode step reads in one pass: the files of ``kda_ref`` that one ``LLM.step()`` enters.

``docs/architecture.md`` ("A decode step, file by file") walks the same path. The count is taken as a
newcomer would follow the code: every Python function called while the engine runs one decode step of
one request (default engine settings, each trained demo model: K3's swapped parts live in the
same files), grouped by the file that defines it.
A new file on the path fails :func:`test_a_plain_decode_step_enters_only_the_files_of_its_path`; so
does one that left it (update the list, and the walk-through, when the path gets shorter).
"""

from __future__ import annotations

import collections
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kda_ref.cache.sequence import Sequence
from kda_ref.engine import LLM, SamplingParams
from kda_ref.train import load_trained

# the decode path, in the order a reader meets it (docs/architecture.md)
DECODE_PATH = (
    "engine/llm.py",  # LLM.step -> schedule, run, postprocess
    "engine/scheduler.py",  # who runs; ScheduledItem / SchedulerOutput; postprocess
    "engine/request_memory.py",  # the progress watch; a request's KV pages
    "cache/sequence.py",  # the request's tokens (Request's base)
    "engine/runner.py",  # the batch, the forward, sampling
    "model/batch.py",  # ForwardBatch -> DecodePlan
    "model/model.py",  # forward_batch -> decode_hidden -> the layers -> lm_head
    "model/decoder.py",  # one decoder layer over the residual stream (DecodeMode)
    "model/kda_layer.py",  # KDAAttention.decode
    "model/mla_layer.py",  # MLAAttention.decode
    "model/mlp.py",  # the dense MLP / MoE fused forward
    "model/parts.py",  # the layers' parts (gates, activation), fused weights, the fused RMSNorm
    "ops/short_conv.py",  # the conv window updated in its slot
    "ops/dispatcher.py",  # the KDA kernel of the decode phase
    "ops/kda_recurrent.py",  # the recurrent state updated in its slot
    "ops/pad_rows.py",  # the MLA rows written into their pages
    "engine/sampling.py",  # greedy rows
    "engine/stopping.py",  # the stop rules the scheduler applies as it appends the token
)
# 18 files on 2026-12-05 (31 that morning); nano-vllm's decode step passes ~14
# Python calls into kda_ref per plain decode step, pinned (2026-12-07: 167 and 194, from 227 and 280 the day before and
# 294 and 357 before that: each layer's fused weights one cache entry (one version check a step), the step's kind
# counted once as the scheduler adds its items, so a plain decode step asks no item about drafts, trees or prompt
# logprobs again); the goal was 200. +3 on 2026-12-07 (170 and 197): the token that stops a request by its id is
# kept out of its text (stopping.text_ids, is_stop_token), as vLLM's detokenizer keeps it out
MAX_CALLS = {"kimi_linear": 170, "k3": 197}


def files_entered(fn) -> collections.Counter:
    """``{file under kda_ref/: calls}`` of every Python function ``fn()`` calls (this thread)."""
    calls: collections.Counter = collections.Counter()

    def profile(frame, event, arg):
        if event == "call":
            path = frame.f_code.co_filename
            if "/kda_ref/" in path:
                calls[path.split("/kda_ref/", 1)[1]] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


@pytest.fixture(scope="module", params=["kimi_linear", "k3"])
def decoding_llm(request):
    """An engine on a trained demo (Kimi-Linear's, or K3's with its parts swapped), one request decoding."""
    llm = LLM(load_trained(kind=request.param))
    llm.add_request(list(range(1, 9)), SamplingParams(max_tokens=40, ignore_eos=True))
    llm.step()  # the prefill
    llm.step()  # the first decode (warm)
    return request.param, llm


def test_a_plain_decode_step_enters_only_the_files_of_its_path(decoding_llm):
    kind, llm = decoding_llm
    calls = files_entered(llm.step)
    assert llm.num_running == 1  # still decoding: the step measured was a decode step
    got = set(calls)
    assert got == set(DECODE_PATH), (f"new on the path: {sorted(got - set(DECODE_PATH))}; "
                                     f"left it: {sorted(set(DECODE_PATH) - got)}")
    total = sum(calls.values())
    assert total <= MAX_CALLS[kind], f"{total} Python calls into kda_ref: {calls.most_common(6)}"


@given(st.lists(st.integers(0, 9), max_size=6), st.lists(st.integers(0, 9), max_size=6), st.data())
def test_token_slice_is_the_slice_of_all_token_ids(prompt, output, data):
    seq = Sequence(0, prompt, output)
    n = len(prompt) + len(output)
    start = data.draw(st.integers(0, n))
    stop = data.draw(st.integers(start, n))
    assert seq.token_slice(start, stop) == seq.all_token_ids[start:stop]
