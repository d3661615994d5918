"""``checkpoint_policy="sglang"``: where SGLang's radix cache keeps KDA states, step by step.

SGLang (extra_buffer) tracks at most one state per prefill step -- the last chunk-aligned position
counted from where the step started, or the branching point the match reported when it falls in the
step at a chunk multiple -- into one of two ping-pong track slots per request; during decode it
tracks every ``mamba_track_interval`` tokens; a prefill step that does not finish the prompt inserts
a copy into the tree (``cache_unfinished_req``), and at finish the last tracked state is donated
(``cache_finished_req``).
"""

from __future__ import annotations

import pytest
import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.memory import PageKind
from kda_ref.model import HybridModel
from kda_ref.trace import TraceRecorder

CFG = ModelConfig.micro()


@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=0).eval()


def state_positions(tree) -> list[int]:
    out, stack = [], [(tree.root, 0)]
    while stack:
        node, depth = stack.pop()
        for child in node.children.values():
            end = depth + len(child.key)
            if child.state is not None:
                out.append(end)
            stack.append((child, end))
    return sorted(out)


def _llm(model, **kw):
    rec = TraceRecorder()
    kw.setdefault("max_num_batched_tokens", 100)
    return rec, LLM(model, prefix_cache="radix", checkpoint_policy="sglang", tracer=rec, **kw)


def test_one_state_per_prefill_step_and_one_per_interval_of_decode(model):
    rec, llm = _llm(model, track_interval=128)
    llm.generate([list(range(1, 231))], SamplingParams(max_tokens=40, ignore_eos=True))  # 230 + 39 computed
    ops = [(e.step, e.op, e.position) for e in rec.events_of("cache") if e.op in ("track", "snapshot", "donate")]
    assert ops == [
        (1, "track", 64), (1, "snapshot", 64),  # step 1: tokens 0..100 -> 0 + 64; prompt unfinished: inserted
        (2, "track", 164), (2, "snapshot", 164),  # step 2: 100..200 -> 100 + 64 (counted from the step's start)
        # step 3: 200..230, shorter than a chunk: nothing; then decode
        (29, "track", 256),  # the state after 256 tokens (a multiple of the interval), kept in a track slot
        (42, "donate", 256),  # finish: the last tracked state goes to the tree, not the final one (269)
    ]
    assert state_positions(llm.prefix_cache.tree) == [64, 164, 256]
    assert llm.stats()["states_tracked"] == 3


def test_the_branching_point_replaces_the_last_aligned_position(model):
    rec, llm = _llm(model, max_num_batched_tokens=512)
    g = torch.Generator().manual_seed(0)
    root = torch.randint(0, 256, (150,), generator=g).tolist()
    a = root + torch.randint(0, 256, (50,), generator=g).tolist()  # 200 tokens, one step
    b = root + torch.randint(0, 256, (100,), generator=g).tolist()  # 250 tokens, shares 150 with a
    llm.generate([a], SamplingParams(max_tokens=3, ignore_eos=True))
    assert state_positions(llm.prefix_cache.tree) == [192]  # a's one step: 200 // 64 * 64, donated at finish
    llm.generate([b], SamplingParams(max_tokens=3, ignore_eos=True))
    match = next(e for e in rec.events_of("cache") if e.op == "match" and e.req_id == 1)
    assert match.detail["branching_len"] == 128 and match.detail["state_len"] == 0
    tracked = [e.position for e in rec.events_of("cache") if e.op == "track" and e.req_id == 1]
    assert tracked == [128]  # not 250 // 64 * 64 = 192: b's state at the branch is what a third request needs
    assert state_positions(llm.prefix_cache.tree) == [128, 192]
    c = root[:140] + [7, 7, 7]
    hit = llm.generate([c], SamplingParams(max_tokens=2))[0]
    assert llm.stats()["cached_prompt_tokens"] == 128 and hit.finish_reason in ("length", "stop")


def test_each_running_request_holds_two_track_slots(model):
    rec, llm = _llm(model)
    llm.add_request(list(range(1, 60)), SamplingParams(max_tokens=5, ignore_eos=True))
    llm.add_request(list(range(3, 50)), SamplingParams(max_tokens=5, ignore_eos=True))
    llm.step()
    owned = llm.pool.ownership()[PageKind.CHECKPOINT.value]
    per_req = {rid: sum(o == rid for o in owned.values()) for rid in (0, 1)}
    assert per_req == {0: 2, 1: 2}
    while llm.has_unfinished():
        llm.step()
    llm.flush_cache()
    assert llm.pool.is_empty()


@pytest.mark.parametrize("prompt_len", [1, 2])
def test_a_prompt_too_short_to_match_gives_its_track_slots_back(model, prompt_len):
    """A one-token prompt has nothing to match, so admission keeps no record of it; its two track slots,
    reserved all the same, come back when it finishes (they leaked until 2026-12-06)."""
    rec, llm = _llm(model)
    llm.generate([list(range(7, 7 + prompt_len))], SamplingParams(max_tokens=1, ignore_eos=True))
    llm.flush_cache()
    assert llm.pool.is_empty(), llm.pool.used_bytes


def test_the_answers_do_not_change(model):
    g = torch.Generator().manual_seed(5)
    root = torch.randint(0, 256, (170,), generator=g).tolist()
    prompts = [root + torch.randint(0, 256, (n,), generator=g).tolist() for n in (20, 35, 3)]
    params = SamplingParams(max_tokens=70, ignore_eos=True, return_logits=True)
    plain = [LLM(model).generate([p], params)[0] for p in prompts]
    _, llm = _llm(model, track_interval=64, max_num_batched_tokens=64)
    cached = [llm.generate([p], params)[0] for p in prompts]
    assert llm.stats()["hits"] >= 1
    for a, b in zip(plain, cached):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize("interval", [100, 0, 32, True])
def test_a_bad_track_interval_is_refused(model, interval):
    with pytest.raises(ValueError, match="^track_interval: must be (an int that is )?a positive multiple of the chunk size"):
        LLM(model, prefix_cache="radix", checkpoint_policy="sglang", track_interval=interval)


def test_no_buffer_snapshots_each_unfinished_prefill_step_and_donates_the_end(model):
    """SGLang's no_buffer strategy (what "auto" resolved to in the server_args.py read): a copy of
    the working state after every prefill step that leaves the prompt unfinished, at whatever
    position the step ended (page size 1), and the end state donated at finish."""
    rec = TraceRecorder()
    llm = LLM(model, prefix_cache="radix", checkpoint_policy="sglang_no_buffer", tracer=rec,
              max_num_batched_tokens=100)
    llm.generate([list(range(1, 231))], SamplingParams(max_tokens=40, ignore_eos=True))
    ops = [(e.op, e.position) for e in rec.events_of("cache") if e.op in ("snapshot", "donate", "track",
                                                                          "checkpoint_create")]
    assert ops == [("snapshot", 100), ("snapshot", 200), ("donate", 269)]
    assert state_positions(llm.prefix_cache.tree) == [100, 200, 269]
