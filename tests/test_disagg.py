"""Prefill/decode disaggregation (:mod:`kda_ref.disagg`): the handoff (KV, KDA state, conv window at
the prompt boundary, checksummed) gives the single engine's tokens; every damaged or mismatched
handoff is refused and recomputed, with nothing leaked on either side."""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace

import pytest
import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.disagg import (DisaggregatedLLM, Disaggregation, DisaggregationError, DistDisaggregation, HandoffError,
                            LocalDisaggregation, capture, verify)
from kda_ref.disagg.stream import Outbound

PARAMS = SamplingParams(max_tokens=10, ignore_eos=True, return_logits=True)


def _prompts(lens=(40, 7, 90), seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (L,), generator=g).tolist() for L in lens]


def _single(prompts, **kw):
    return LLM(ModelConfig.micro(), seed=0, **kw).generate(prompts, PARAMS, use_tqdm=False)


def _empty(d: DisaggregatedLLM) -> bool:
    return d.prefill.pool.is_empty() and d.decode.pool.is_empty()


@pytest.mark.parametrize("prefix_cache", ["none", "radix"])
def test_disaggregated_generation_equals_the_single_engine(prefix_cache):
    prompts = _prompts()
    want = _single(prompts, prefix_cache=prefix_cache)
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, prefix_cache=prefix_cache)
    got = d.generate(prompts, PARAMS)
    for a, b in zip(want, got):
        assert a.token_ids == b.token_ids
        # the decode side produced tokens 2..n; the first came from the prefill side
        torch.testing.assert_close(b.logits, a.logits[1:], atol=1e-4, rtol=0)
    assert d.counters["handoffs"] == 3 and d.counters["recomputed"] == 0
    cfg = ModelConfig.micro()
    per_state = cfg.linear_num_heads * cfg.linear_head_dim ** 2 * 4 * len(cfg.kda_layer_ids)
    assert d.counters["state_bytes"] == 3 * per_state  # one state per KDA layer and request, whatever the length
    assert d.counters["kv_bytes"] == sum(len(p) for p in prompts) * cfg.mla_latent_dim * 4 * len(cfg.mla_layer_ids)
    if prefix_cache == "none":
        assert _empty(d)


@pytest.mark.parametrize("fault", ["corrupt", "drop", "truncate"])
def test_a_damaged_transfer_is_refused_and_recomputed(fault):
    prompts = _prompts((40,))
    want = _single(prompts)
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0)
    d.prefill_te.fault = fault
    got = d.generate(prompts, PARAMS)
    assert got[0].token_ids == want[0].token_ids  # never a wrong token
    assert d.counters["recomputed"] == 1 and d.counters["handoffs"] == 0 and "checksum" in d.last_error
    assert _empty(d)  # nothing leaked: the decode side allocated nothing it kept, the prefill side released


def _captured(prompt):
    llm = LLM(ModelConfig.micro(), seed=0)
    seen = []
    llm.add_finish_listener(lambda req: seen.append(capture(llm.pool, req, len(req.prompt_token_ids))))
    llm.generate([prompt], SamplingParams(max_tokens=1), use_tqdm=False)
    return llm, seen[0]


def test_the_decode_side_refuses_a_wrong_boundary_prompt_or_region():
    prompt = _prompts((30,))[0]
    llm, (staging, man) = _captured(prompt)
    ok = verify(staging, man, llm.pool, prompt)
    assert set(ok) == {(k, layer) for layer in llm.pool.tensors.kda_index for k in ("state", "conv")} | \
        {("kv", layer) for layer in llm.pool.tensors.mla_index}
    with pytest.raises(HandoffError, match="boundary"):
        verify(staging, man, llm.pool, prompt + [1])  # the state of another boundary
    with pytest.raises(HandoffError, match="prefix_hash"):
        verify(staging, man, llm.pool, [9] + prompt[1:])  # computed for other tokens
    missing = dataclasses.replace(man, regions=[r for r in man.regions if r.kind != "conv"])
    with pytest.raises(HandoffError, match="regions: missing"):
        verify(staging, missing, llm.pool, prompt)  # only KV and state: a conv window lost
    kv_only = dataclasses.replace(man, regions=[r for r in man.regions if r.kind == "kv"])
    with pytest.raises(HandoffError, match="regions: missing"):
        verify(staging, kv_only, llm.pool, prompt)  # a pure-attention handoff
    with pytest.raises(HandoffError, match="bytes arrived"):
        verify(staging[:100], man, llm.pool, prompt)


def test_the_manifest_lists_every_region_once():
    prompt = _prompts((20,))[0]
    llm, (staging, man) = _captured(prompt)
    assert man.boundary == 20 and man.total_bytes == staging.numel()
    offs = sorted((r.offset, r.nbytes) for r in man.regions)
    assert all(a[0] + a[1] == b[0] for a, b in zip(offs, offs[1:]))  # contiguous, no overlap
    kinds = man.bytes_by_kind()
    assert kinds["kv"] > 0 and kinds["state"] > kinds["conv"] > 0


def test_bad_transfer_name():
    with pytest.raises(ValueError, match="transfer"):
        DisaggregatedLLM(ModelConfig.micro(), transfer="rdma")
    with pytest.raises(ValueError, match="transfer: LocalDisaggregation is the 'local' mode"):
        LocalDisaggregation(ModelConfig.micro(), transfer="dist")


def test_disaggregated_llm_is_the_class_of_both_modes(monkeypatch):
    """``DisaggregatedLLM(..., transfer=)`` builds the subclass that names that transfer; a subclass of a
    mode is built by its own class; a new mode is a subclass with a new name."""
    assert isinstance(DisaggregatedLLM, type) and Disaggregation is DisaggregatedLLM
    assert DisaggregatedLLM.modes == {"local": LocalDisaggregation, "dist": DistDisaggregation}
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0)
    assert type(d) is LocalDisaggregation and isinstance(d, DisaggregatedLLM) and d.checker is d.prefills[0]
    dd = DisaggregatedLLM(ModelConfig.micro(), transfer="dist", timeout=5)
    assert type(dd) is DistDisaggregation and dd._cluster is None  # nothing started, no engine built

    class Counted(LocalDisaggregation):
        def step(self):
            self.steps = getattr(self, "steps", 0) + 1
            return super().step()

    c = Counted(ModelConfig.micro(), seed=0)
    prompts = _prompts((12,))
    assert c.generate(prompts, PARAMS)[0].token_ids == _single(prompts)[0].token_ids and c.steps > 1
    monkeypatch.setattr(DisaggregatedLLM, "modes", dict(DisaggregatedLLM.modes))  # this test's modes only

    class Echoed(LocalDisaggregation):
        transfer = "echo"

    assert type(DisaggregatedLLM(ModelConfig.micro(), transfer="echo")) is Echoed
    with pytest.raises(TypeError, match="already the mode"):
        type("Again", (LocalDisaggregation,), {"transfer": "local"})
    with pytest.raises(TypeError, match="not a mode"):
        type("Abstract", (DisaggregatedLLM,), {})(ModelConfig.micro())


def test_both_transfer_engines_implement_the_batch_write_the_interface_declares():
    import inspect

    from kda_ref.disagg import LocalTransferEngine, TransferEngine
    from kda_ref.disagg.dist import DistTransferEngine

    assert {"register", "unregister", "batch_write", "status"} <= TransferEngine.__abstractmethods__
    want = inspect.signature(TransferEngine.batch_write)
    for cls in (LocalTransferEngine, DistTransferEngine):
        assert "batch_write" in cls.__dict__ and inspect.signature(cls.batch_write) == want


def test_step_level_driving_and_per_request_bytes():
    prompts = _prompts((12, 33))
    want = _single(prompts)
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0)
    ids = [d.add_request(p, PARAMS) for p in prompts]
    finished = {}
    steps = 0
    while d.has_unfinished():
        for o in d.step():
            finished[o.req_id] = o
        steps += 1
        assert steps < 100
    assert sorted(finished) == sorted(ids)
    assert [finished[i].token_ids for i in ids] == [w.token_ids for w in want]
    per = d.stats()["bytes_per_request"]
    assert per[ids[1]]["kv"] > per[ids[0]]["kv"] and per[ids[1]]["state"] == per[ids[0]]["state"]
    with pytest.raises(ValueError, match="params"):
        d.add_request([1, 2], params="greedy")


# ---- across processes (torch.distributed, gloo) -------------------------------------------------------
def test_prefill_and_decode_workers_in_their_own_processes_give_the_single_engine_tokens():
    import multiprocessing

    prompts = _prompts()
    want = _single(prompts)
    with DisaggregatedLLM(ModelConfig.micro(), seed=0, transfer="dist", timeout=30) as d:
        got = d.generate(prompts, PARAMS)
        assert [o.token_ids for o in got] == [o.token_ids for o in want]
        for a, b in zip(want, got):
            torch.testing.assert_close(b.logits, a.logits[1:], atol=1e-4, rtol=0)
        assert d.counters["handoffs"] == 3 and d.counters["recomputed"] == 0 and d.counters["state_bytes"] > 0
        per = d.stats()["bytes_per_request"]
        assert sorted(per) == [0, 1, 2] and per[2]["kv"] > per[0]["kv"] > per[1]["kv"]  # prompts of 90, 40, 7 tokens
        assert d.counters["transfer_s"] > 0
        # the same workers, driven step by step
        ids = [d.add_request(p, PARAMS) for p in prompts[:2]]
        finished, t0 = {}, time.monotonic()
        while d.has_unfinished():
            finished.update({o.req_id: o for o in d.step()})
            assert time.monotonic() - t0 < 120
        assert [finished[i].token_ids for i in ids] == [w.token_ids for w in want[:2]]
    assert not multiprocessing.active_children()
    assert not d.has_unfinished() and d.step() == []  # closed: nothing runs until the next request


# the widest sweeps across processes run under -m slow; one of each kind stays in the default run
@pytest.mark.parametrize("fault,why", [("corrupt", "checksum"),
                                       pytest.param("truncate", "checksum", marks=pytest.mark.slow),
                                       pytest.param("drop", "checksum", marks=pytest.mark.slow),
                                       pytest.param("wrong_boundary", "boundary", marks=pytest.mark.slow)])
def test_a_damaged_handoff_across_processes_is_refused_and_recomputed(monkeypatch, fault, why):
    """The bytes arrive (gloo delivers a short message whole), the decode worker's checks refuse them."""
    monkeypatch.setenv("KDA_PD_FAULT", fault)  # the first last send only
    prompts = _prompts((40, 25))
    with DisaggregatedLLM(ModelConfig.micro(), seed=0, transfer="dist", timeout=10) as d:
        got = d.generate(prompts, PARAMS)
    monkeypatch.delenv("KDA_PD_FAULT")
    assert [o.token_ids for o in got] == [o.token_ids for o in _single(prompts)]
    assert d.counters["recomputed"] == 1 and d.counters["handoffs"] == 1 and why in d.last_error
    assert not d.counters["prefill_failed"]  # a refused handoff is not a dead sender
    assert d.worker_pools_empty == {0: True, 1: True}  # nothing leaked on either side


@pytest.mark.slow  # the in-process streaming tests cover the default run
def test_kv_chunks_stream_across_processes():
    prompts = _prompts((90,))
    kw = dict(max_num_batched_tokens=32)
    with DisaggregatedLLM(ModelConfig.micro(), seed=0, transfer="dist", timeout=30, **kw) as d:
        got = d.generate(prompts, PARAMS)
    assert got[0].token_ids == _single(prompts, **kw)[0].token_ids
    assert d.counters["early_sends"] >= 2 and 0 < d.counters["kv_bytes_early"] < d.counters["kv_bytes"]
    assert d.counters["handoffs"] == 1


def test_a_dead_decode_worker_is_an_error_and_no_process_is_left():
    import multiprocessing

    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, transfer="dist", timeout=5)
    d.add_request(_prompts((20,))[0], PARAMS)
    d._cluster.procs[1].kill()
    with pytest.raises(DisaggregationError, match="decode worker"):
        t0 = time.monotonic()
        while d.has_unfinished() and time.monotonic() - t0 < 60:
            d.step()
    d.close()
    assert not multiprocessing.active_children()


@pytest.mark.slow  # ~20 s: the decode worker stopped, then the silence limit
def test_a_hung_decode_worker_is_an_error_soon_after_the_silence_limit():
    """A decode worker stopped (SIGSTOP) while it generates: the error comes at the silence limit, not 15 s
    after it (the shutdown waited 10 s for the hung worker's last word, then 5 s on a SIGTERM it could not
    act on), and the stopped worker is gone."""
    import multiprocessing
    import os
    import signal

    from kda_ref.disagg.dist import silence_limit

    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, transfer="dist", timeout=2)
    d.add_request(_prompts((20,))[0], SamplingParams(max_tokens=8000, ignore_eos=True))  # still running when stopped
    while not d.counters.get("handoffs"):
        d.step()
    os.kill(d._cluster.procs[1].pid, signal.SIGSTOP)
    t0 = time.monotonic()
    with pytest.raises(DisaggregationError, match="decode worker 1 silent"):
        while time.monotonic() - t0 < 60:
            d.step()
    assert time.monotonic() - t0 < silence_limit(2) + 4
    d.close()
    assert not multiprocessing.active_children()


@pytest.mark.slow  # several engines in one process: test_several_prefill_and_decode_engines_share_the_requests
def test_several_worker_processes_share_requests_and_route_a_follow_up_to_its_decode_worker():
    import multiprocessing

    g = torch.Generator().manual_seed(1)
    p1 = torch.randint(0, 256, (70,), generator=g).tolist()
    others = _prompts((30, 55, 12))
    sp = SamplingParams(max_tokens=12, ignore_eos=True)
    single = LLM(ModelConfig.micro(), seed=0, prefix_cache="radix")
    want = single.generate([p1, *others], sp, use_tqdm=False)
    p2 = p1 + want[0].token_ids + torch.randint(0, 256, (20,), generator=g).tolist()
    want2 = single.generate([p2], sp, use_tqdm=False)[0]
    with DisaggregatedLLM(ModelConfig.micro(), seed=0, transfer="dist", timeout=30, num_prefill=2, num_decode=2,
                          prefix_cache="radix") as d:
        got = d.generate([p1, *others], sp)
        assert [o.token_ids for o in got] == [w.token_ids for w in want]
        assert d.counters["handoffs"] == 4 and d.counters["routed_to_decode"] == 0
        assert d.generate([p2], sp)[0].token_ids == want2.token_ids  # a follow-up turn
        assert d.counters["routed_to_decode"] == 1 and d.counters["handoffs"] == 4
        assert len(d._cluster.procs) == 4
    assert not multiprocessing.active_children()


@pytest.mark.parametrize("fault", ["die_mid_transfer", pytest.param("hang_mid_transfer", marks=pytest.mark.slow),
                                   pytest.param("hang_in_prefill", marks=pytest.mark.slow)])
def test_a_prefill_worker_killed_or_hung_mid_transfer_is_recomputed_by_the_decode_worker(monkeypatch, fault):
    import multiprocessing

    """Dead or hung after the manifest went out (the decode worker's receive times out), or hung before
    announcing anything (the parent's watchdog: silent while it has work)."""
    monkeypatch.setenv("KDA_PD_FAULT", fault)
    prompts = _prompts()
    t0 = time.monotonic()
    with DisaggregatedLLM(ModelConfig.micro(), seed=0, transfer="dist", timeout=4) as d:
        got = d.generate(prompts, PARAMS)
    monkeypatch.delenv("KDA_PD_FAULT")
    assert time.monotonic() - t0 < 90  # no hang: a receive timeout or the watchdog, then the decode worker prefills
    assert [o.token_ids for o in got] == [o.token_ids for o in _single(prompts)]  # never a wrong token
    assert d.counters["prefill_failed"] and d.counters["recomputed"] == 3 and d.counters["handoffs"] == 0
    assert d.worker_pools_empty[1]  # the decode worker released everything
    assert not multiprocessing.active_children()
    # the workers stopped: the next request starts fresh ones, routed afresh (the old router kept the dead
    # prefill worker's flag, and every later request went to the decode worker for good)
    assert d.router.alive == [True] and d.router.prefill_load == [0] and d.router.decode_load == [0]


def test_a_request_whose_workers_fail_to_start_leaves_no_load(tmp_path):
    """The router counted a request on its instances before the submission that starts the workers; when
    they failed to start (here: weights that do not load), the loads kept the request that never ran."""
    import json
    import multiprocessing
    from pathlib import Path

    import kda_ref

    config = json.loads((Path(kda_ref.__file__).parent / "assets" / "trained_tiny" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors" * 50)
    d = DisaggregatedLLM(tmp_path, transfer="dist", timeout=10)
    with pytest.raises(DisaggregationError, match="model.safetensors"):
        d.add_request(list(range(1, 20)), PARAMS)
    assert d.router.prefill_load == [0] and d.router.decode_load == [0] and d.counters["routed_to_decode"] == 0
    d.close()
    assert not multiprocessing.active_children()


@pytest.mark.parametrize("kw,match", [(dict(timeout=0), "timeout"), (dict(timeout=True), "timeout"),
                                      (dict(timeout=float("inf")), "timeout"),  # it failed in the workers, unnamed
                                      (dict(memory_budget_bytes=0), "memory_budget_bytes"),
                                      # 100,000 ran out of file descriptors after 15 s, unnamed
                                      (dict(num_prefill=100_000), "num_prefill"), (dict(num_decode=64), "num_decode"),
                                      (dict(num_prefill=40, num_decode=40), "num_prefill / num_decode")])
def test_bad_configuration_is_named(kw, match):
    with pytest.raises(ValueError, match=match):
        DisaggregatedLLM(ModelConfig.micro(), transfer="dist", **kw)


def test_a_tracer_that_is_not_one_is_named_in_process():
    with pytest.raises(ValueError, match="tracer"):
        DisaggregatedLLM(ModelConfig.micro(), transfer="local", tracer=object())


def test_a_follow_up_turn_is_routed_to_the_decode_side_and_reuses_its_state():
    """Cross-instance reuse: the decode engine donated the first turn's end state to its radix cache;
    the second turn (first prompt + answer + more) goes straight to it and restores that state."""
    g = torch.Generator().manual_seed(1)
    p1 = torch.randint(0, 256, (70,), generator=g).tolist()
    sp = SamplingParams(max_tokens=12, ignore_eos=True)
    single = LLM(ModelConfig.micro(), seed=0, prefix_cache="radix")
    a1 = single.generate([p1], sp, use_tqdm=False)[0]
    p2 = p1 + a1.token_ids + torch.randint(0, 256, (20,), generator=g).tolist()
    a2 = single.generate([p2], sp, use_tqdm=False)[0]
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, prefix_cache="radix")
    assert d.generate([p1], sp)[0].token_ids == a1.token_ids
    assert d.generate([p2], sp)[0].token_ids == a2.token_ids
    assert d.counters["routed_to_decode"] == 1 and d.counters["handoffs"] == 1
    assert d.decode.stats()["cached_prompt_tokens"] == 70 + 12 - 1  # the first turn's end state
    # without a prefix cache on the decode side every request goes through the prefill side
    plain = DisaggregatedLLM(ModelConfig.micro(), seed=0)
    plain.generate([p1], sp)
    plain.generate([p2], sp)
    assert plain.counters["routed_to_decode"] == 0 and plain.counters["handoffs"] == 2


def test_a_state_of_another_boundary_than_the_kv_is_refused():
    prompt = _prompts((30,))[0]
    llm, (staging, man) = _captured(prompt)
    mixed = dataclasses.replace(man, regions=[dataclasses.replace(r, boundary=22) if r.kind != "kv" else r
                                              for r in man.regions])
    with pytest.raises(HandoffError, match="different boundaries"):
        verify(staging, mixed, llm.pool, prompt)


def test_several_prefill_and_decode_engines_share_the_requests():
    prompts = _prompts((40, 7, 90, 25, 60))
    want = _single(prompts)
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, num_prefill=2, num_decode=3)
    got = d.generate(prompts, PARAMS)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert d.counters["handoffs"] == 5
    prefilled = [e.stats()["prompt_tokens"] for e in d.prefills]
    decoded = [e.stats()["generated_tokens"] for e in d.decodes]
    assert all(n > 0 for n in prefilled) and sum(n > 0 for n in decoded) >= 2  # the work is spread
    assert all(e.pool.is_empty() for e in (*d.prefills, *d.decodes))
    with pytest.raises(ValueError, match="num_decode"):
        DisaggregatedLLM(ModelConfig.micro(), num_decode=0)


def test_the_received_boundary_state_enters_the_decode_sides_radix_tree():
    """The decode side keeps the handed-off state as a checkpoint at the prompt boundary: a later
    prompt branching from that prompt (not from its answer) is routed to it and reuses the state."""
    g = torch.Generator().manual_seed(2)
    p1 = torch.randint(0, 256, (64,), generator=g).tolist()
    p2 = p1 + torch.randint(0, 256, (10,), generator=g).tolist()
    sp = SamplingParams(max_tokens=8, ignore_eos=True)
    single = LLM(ModelConfig.micro(), seed=0, prefix_cache="radix")
    want = [single.generate([p], sp, use_tqdm=False)[0].token_ids for p in (p1, p2)]
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, prefix_cache="radix")
    got = [d.generate([p], sp)[0].token_ids for p in (p1, p2)]
    assert got == want
    s = d.decode.stats()
    assert d.counters["routed_to_decode"] == 1 and s["checkpoints_created"] >= 1 and s["cached_prompt_tokens"] == 64


# ---- KV per prefill chunk, the states once -----------------------------------------------------------
def test_kv_rows_leave_with_each_prefill_chunk_and_the_states_only_at_the_boundary():
    prompts = _prompts((90, 40))
    kw = dict(max_num_batched_tokens=32)  # a 90-token prompt is prefilled in chunks
    want = _single(prompts, **kw)
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, **kw)
    got = d.generate(prompts, PARAMS)
    assert [o.token_ids for o in got] == [w.token_ids for w in want]
    cfg, page = ModelConfig.micro(), d.prefill.pool.tensors.page_size
    row = cfg.mla_latent_dim * 4 * len(cfg.mla_layer_ids)  # one token's KV over the MLA layers
    per_state = cfg.linear_num_heads * cfg.linear_head_dim ** 2 * 4 * len(cfg.kda_layer_ids)
    assert d.counters["early_sends"] >= 2  # rows of finished chunks, before either prompt was done
    assert d.counters["kv_bytes_early"] > 0 and d.counters["kv_bytes_early"] % (page * row) == 0  # whole pages
    assert d.counters["kv_bytes_early"] < d.counters["kv_bytes"] == 130 * row
    assert d.counters["state_bytes"] == 2 * per_state  # each state sent once, at its boundary
    assert d.counters["handoffs"] == 2 and _empty(d)


def test_a_damaged_early_chunk_is_caught_by_the_final_checksum():
    prompts = _prompts((90,))
    kw = dict(max_num_batched_tokens=32)
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, **kw)
    d.prefill_te.fault = "corrupt"  # the first send: KV rows of the first chunk
    got = d.generate(prompts, PARAMS)
    assert got[0].token_ids == _single(prompts, **kw)[0].token_ids
    assert d.counters["early_sends"] >= 1 and d.counters["recomputed"] == 1 and "checksum" in d.last_error
    assert _empty(d)


def test_an_outbound_sends_whole_pages_and_starts_again_after_a_preemption():
    llm = LLM(ModelConfig.micro(), seed=0)
    page = llm.pool.tensors.page_size
    out = Outbound(boundary=5 * page)
    req = SimpleNamespace(num_computed_tokens=page + 3, pages=list(range(5)), num_preemptions=0)
    first = out.chunk(llm.pool, req)
    assert out.sent_upto == page and len(first) == len(llm.pool.tensors.mla_index)  # the partial page waits
    assert out.chunk(llm.pool, req) == []  # nothing new
    req.num_computed_tokens = 3 * page
    out.chunk(llm.pool, req)
    assert out.sent_upto == 3 * page
    req.num_computed_tokens = page  # preempted and recomputed from the start: its rows go again
    again = out.chunk(llm.pool, req)
    assert out.sent_upto == page and [off for off, _ in again] == [off for off, _ in first]
    assert out.early_sends == 3


# ---- the decode side's block cache ------------------------------------------------------------------
def test_the_received_state_becomes_a_state_block_of_the_decode_sides_block_cache():
    g = torch.Generator().manual_seed(3)
    p1 = torch.randint(0, 256, (64,), generator=g).tolist()  # one block: the boundary has a hash
    p2 = p1 + torch.randint(0, 256, (10,), generator=g).tolist()
    sp = SamplingParams(max_tokens=8, ignore_eos=True)
    single = LLM(ModelConfig.micro(), seed=0, prefix_cache="block")
    want = [single.generate([p], sp, use_tqdm=False)[0].token_ids for p in (p1, p2)]
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, prefix_cache="block")
    assert [d.generate([p], sp)[0].token_ids for p in (p1, p2)] == want
    s = d.decode.stats()
    assert d.counters["routed_to_decode"] == 1 and s["cached_prompt_tokens"] == 64
    # a boundary inside a block has no hash in the block cache: its KV is kept, its state is not
    p3 = torch.randint(0, 256, (70,), generator=g).tolist()
    e = DisaggregatedLLM(ModelConfig.micro(), seed=0, prefix_cache="block")
    e.generate([p3], sp)
    assert e.decode.prefix_cache.occupancy()["cached_kv_tokens"] >= 64


def test_a_prefill_engine_with_a_radix_cache_reuses_its_checkpoints_across_requests():
    g = torch.Generator().manual_seed(4)
    shared = torch.randint(0, 256, (128,), generator=g).tolist()
    p1, p2 = (shared + torch.randint(0, 256, (20,), generator=g).tolist() for _ in range(2))
    sp = SamplingParams(max_tokens=6, ignore_eos=True)
    single = LLM(ModelConfig.micro(), seed=0, prefix_cache="radix")
    want = [single.generate([p], sp, use_tqdm=False)[0].token_ids for p in (p1, p2)]
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, prefix_cache="radix")
    assert [d.generate([p], sp)[0].token_ids for p in (p1, p2)] == want
    assert d.counters["routed_to_decode"] == 0 and d.counters["handoffs"] == 2  # both went through prefill
    assert d.prefill.stats()["cached_prompt_tokens"] == 128  # the second prompt restored the shared prefix


@pytest.mark.slow
def test_a_hung_prefill_worker_does_not_stop_the_healthy_one(monkeypatch):
    """Two prefill workers, rank 0 hangs after announcing its first last send: the decode worker keeps
    receiving and decoding rank 1's handoffs while that receive is pending, then prefills rank 0's."""
    import multiprocessing

    monkeypatch.setenv("KDA_PD_FAULT", "hang_mid_transfer")
    prompts = _prompts((40, 30, 20, 50), seed=5)
    with DisaggregatedLLM(ModelConfig.micro(), seed=0, transfer="dist", timeout=4, num_prefill=2) as d:
        got = d.generate(prompts, PARAMS)
        alive = list(d.router.alive)  # while these workers run (stopping them takes a fresh router)
    monkeypatch.delenv("KDA_PD_FAULT")
    assert [o.token_ids for o in got] == [o.token_ids for o in _single(prompts)]
    assert d.counters["handoffs"] >= 1 and d.counters["recomputed"] >= 1  # rank 1 handed off, rank 0's recomputed
    assert d.counters["prefill_failed"] and alive == [False, True] and d.router.alive == [True, True]
    assert d.worker_pools_empty[2]  # the decode worker (rank 2) leaked nothing
    assert not multiprocessing.active_children()


@pytest.mark.slow
def test_a_checkpoint_folder_is_loaded_by_each_worker_process():
    from pathlib import Path

    import kda_ref

    folder = Path(kda_ref.__file__).parent / "assets" / "trained_tiny"
    prompt = list(range(1, 30))
    want = LLM(folder, seed=0).generate([prompt], PARAMS, use_tqdm=False)[0]
    with DisaggregatedLLM(folder, seed=0, transfer="dist", timeout=30) as d:
        assert d.model == folder  # the path crosses to the workers, not the weights
        got = d.generate([prompt], PARAMS)[0]
    assert got.token_ids == want.token_ids and d.counters["handoffs"] == 1


# ---- edge cases of the handoff --------------------------------------------------------------------------
@pytest.mark.parametrize("transfer", ["local", pytest.param("dist", marks=pytest.mark.slow)])
def test_a_request_that_ends_with_its_first_token_never_crosses(transfer):
    prompts = _prompts((30, 20))
    first = _single(prompts[:1])[0].token_ids[0]
    params = [SamplingParams(max_tokens=1), SamplingParams(max_tokens=6, stop_token_ids=[first])]
    want = LLM(ModelConfig.micro(), seed=0).generate([prompts[0], prompts[0]], params, use_tqdm=False)
    with DisaggregatedLLM(ModelConfig.micro(), seed=0, transfer=transfer, timeout=30) as d:
        got = d.generate([prompts[0], prompts[0]], params)
        assert [(o.token_ids, o.finish_reason) for o in got] == [(w.token_ids, w.finish_reason) for w in want]
        assert [o.finish_reason for o in got] == ["length", "stop"]
        assert d.counters["handoffs"] == 0 and d.counters["recomputed"] == 0
        assert d.router.prefill_load == [0] and d.router.decode_load == [0]
    if transfer == "local":
        assert _empty(d)
    else:
        assert d.worker_pools_empty == {0: True, 1: True}


def test_a_full_decode_side_waits_for_room_instead_of_refusing():
    """Two seats on the decode engine, five handoffs: the ones without a seat wait with their bytes
    received and are installed as seats free -- none is recomputed."""
    prompts = _prompts((30, 20, 25, 40, 15), seed=6)
    want = _single(prompts)
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, max_num_seqs=2)
    got = d.generate(prompts, PARAMS)
    assert [o.token_ids for o in got] == [w.token_ids for w in want]
    assert d.counters["handoffs"] == 5 and d.counters["recomputed"] == 0 and _empty(d)


def test_a_decode_side_cache_full_of_received_states_evicts_instead_of_refusing():
    g = torch.Generator().manual_seed(8)
    prompts = [torch.randint(0, 256, (48,), generator=g).tolist() for _ in range(24)]
    sp = SamplingParams(max_tokens=3, ignore_eos=True)
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, prefix_cache="radix", memory_budget_bytes=3 << 20)
    for p in prompts:  # one at a time: every handoff lands in a decode cache that keeps its state
        d.generate([p], sp)
    assert d.counters["handoffs"] == 24 and d.counters["recomputed"] == 0


def test_a_failed_prefill_comes_back_as_an_error_and_frees_its_route(monkeypatch):
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0)

    def broken(*a, **k):
        raise RuntimeError("injected prefill failure")

    monkeypatch.setattr(d.prefill.runner, "run", broken)
    got = d.generate(_prompts((20,)), PARAMS)
    assert got[0].finish_reason == "error" and d.counters["handoffs"] == 0
    assert d.router.prefill_load == [0] and d.router.decode_load == [0] and _empty(d)
    assert not d._flows and not d.decode_te.buffers  # the receive buffer was let go


def test_a_decode_engine_with_one_slot_per_draft_position_takes_handoffs():
    """spec_state='slots' gives each request 1 + k state slots; an installed handoff gets them too."""
    prompts = _prompts((40, 33))
    kw = dict(speculative="ngram", num_speculative_tokens=2, spec_state="slots")
    want = _single(prompts, **kw)
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, **kw)
    got = d.generate(prompts, PARAMS)
    assert [o.token_ids for o in got] == [w.token_ids for w in want]
    assert d.counters["handoffs"] == 2 and _empty(d)


def test_a_follow_up_goes_to_the_decode_side_only_if_it_kept_the_state():
    """The block cache cannot name a boundary inside a block: the router does not send the next
    prompt there for a state it does not have."""
    g = torch.Generator().manual_seed(9)
    p1 = torch.randint(0, 256, (70,), generator=g).tolist()
    p2 = p1 + torch.randint(0, 256, (10,), generator=g).tolist()
    sp = SamplingParams(max_tokens=1, ignore_eos=True)
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, prefix_cache="block")
    d.generate([p1], SamplingParams(max_tokens=2, ignore_eos=True))
    d.generate([p2], sp)
    assert d.counters["routed_to_decode"] == 0 and d.counters["handoffs"] == 1


def test_room_on_the_decode_side_counts_slots_and_pages_against_one_budget():
    """Free memory that covers the slot or the pages, but not both, is no room."""
    from kda_ref.memory import PageKind

    llm = LLM(ModelConfig.micro(), seed=0, memory_budget_bytes=4 << 20)
    pool, sched = llm.pool, llm.scheduler
    S, K, need = pool.sizes.state_bytes, pool.sizes.kv_page_bytes, sched.pages_for(101)
    total = S + need * K
    fill = -(-(pool.free_bytes - total + 1) // K)  # pages to take so that free < S + need * K
    pool.alloc(PageKind.MLA_KV, fill, owner="test")
    assert max(S, need * K) <= pool.free_bytes < total
    assert pool.can_alloc(PageKind.KDA_STATE, 1) and pool.can_alloc(PageKind.MLA_KV, need)
    assert not llm.has_room_for(100, evict=False)


def test_a_waiting_handoff_does_not_evict_the_cache_of_a_busy_decode_engine():
    from kda_ref.disagg.handoff import Manifest
    from kda_ref.disagg.install import install_or_recompute

    llm = LLM(ModelConfig.micro(), seed=0, prefix_cache="radix", memory_budget_bytes=4 << 20)
    llm.generate(_prompts((60, 70), seed=10), SamplingParams(max_tokens=2), use_tqdm=False)
    held = llm.prefix_cache.occupancy()
    assert held["cached_states"] > 0
    llm.add_request(_prompts((20,), seed=11)[0], SamplingParams(max_tokens=50, ignore_eos=True))
    llm.step()  # one request running
    big = Manifest(req_id=0, boundary=40000, prefix_hash="", first_token=0)  # more KV than the whole budget
    assert install_or_recompute(llm, [1] * 40000, PARAMS, big, {}) is None  # waits, nothing queued
    assert llm.prefix_cache.occupancy() == held and len(llm.scheduler.waiting) == 0


def test_the_radix_cache_says_it_holds_a_state_it_already_had(monkeypatch):
    from kda_ref.disagg import llm as disagg_llm

    seen = []
    real = disagg_llm.install_or_recompute

    def spy(*a, **k):
        res = real(*a, **k)
        seen.append(res)
        return res

    monkeypatch.setattr(disagg_llm, "install_or_recompute", spy)
    p = _prompts((64,), seed=12)[0]
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0, prefix_cache="radix", max_num_batched_tokens=32)
    d.generate([p], SamplingParams(max_tokens=2, ignore_eos=True))
    d.router._held[0].clear()  # forget it on the router's side; the tree keeps it
    d.add_request(p + [5], SamplingParams(max_tokens=2, ignore_eos=True))  # not routed: the router forgot
    d.generate([p], SamplingParams(max_tokens=2, ignore_eos=True))
    assert [r.kept_state for r in seen if r is not None][-1] is True  # the same boundary again: held
    # the two prefills shared a prefix in the prefill side's tree while streaming: the rows sent early
    # (this request's) and the tree's rows it switched to may differ in the last bits; the manifest
    # describes the bytes sent, so nothing is refused
    assert d.counters["recomputed"] == 0 and d.counters["early_sends"] > 0


def test_the_callers_sampling_and_stop_strings_rule_both_sides():
    """The prefill side sampled the first token with temperature, top-k and seed alone (penalties dropped: with
    a repetition penalty every greedy answer differed from the single engine's); it checked the first token
    against the stop tokens only (a stop string it completed was missed, and the decode side ran on); and
    the text was decoded again from the tokens, undoing a stop string's cut. Requests the handoff cannot
    carry whole are refused by name."""
    from kda_ref.engine import OutputKind, RequestError

    prompts = ["Hello there, how are", "The quick brown fox", "abc"]
    greedy = SamplingParams(max_tokens=6, ignore_eos=True)
    plain = LLM(ModelConfig.micro(), seed=0).generate(prompts, greedy, use_tqdm=False)
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0)
    cases = [dataclasses.replace(greedy, repetition_penalty=2.0, presence_penalty=0.5),
             dataclasses.replace(greedy, stop=(plain[1].text[:1],)),  # completed by the first token
             dataclasses.replace(greedy, temperature=1.0, seed=5),  # the decode side continues the prefill's draws
             dataclasses.replace(greedy, stop=(plain[1].text[2:4],))]  # by a later one, across the handoff
    for sp in cases:
        want = LLM(ModelConfig.micro(), seed=0).generate(prompts, sp, use_tqdm=False)
        got = d.generate(prompts, sp)
        assert [(o.token_ids, o.text, o.finish_reason) for o in got] == \
            [(o.token_ids, o.text, o.finish_reason) for o in want], sp
    assert want[1].finish_reason == "stop" and len(want[1].token_ids) < 6
    assert [o.token_ids for o in LLM(ModelConfig.micro(), seed=0).generate(prompts, cases[0], use_tqdm=False)] != \
        [o.token_ids for o in plain]  # the penalty changes the answers: the check above can fail
    for sp, name in ((dataclasses.replace(greedy, output_kind=OutputKind.TOKENS), "output_kind"),
                     (dataclasses.replace(greedy, logprobs=2), "logprobs")):
        with pytest.raises(RequestError, match=f"^{name}: "):
            d.generate(prompts, sp)
    assert _empty(d) and not d.has_unfinished()


@pytest.mark.slow  # worker processes and a fallback; the unit of the fallback is ContextParallelError
def test_context_parallel_inside_worker_processes_falls_back_to_one_process():
    """Disaggregation's workers are daemonic processes, which may not start children: a context-parallel
    prefill there failed every long prompt (an AssertionError, not a ContextParallelError, so the engine
    did not fall back). The ranks' failed start is now a ContextParallelError, and the prompt is prefilled
    in the worker's own process: the single engine's tokens, a warning saying why."""
    import multiprocessing

    prompts = _prompts((80, 10))
    sp = SamplingParams(max_tokens=4, ignore_eos=True)
    want = LLM(ModelConfig.micro(), seed=0).generate(prompts, sp, use_tqdm=False)
    kw = dict(context_parallel_size=2, cp_min_tokens=32, cp_backend="gloo", cp_timeout=20)
    with DisaggregatedLLM(ModelConfig.micro(), seed=0, transfer="dist", timeout=30, **kw) as d:
        got = d.generate(prompts, sp)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert [o.finish_reason for o in got] == ["length", "length"] and d.counters["handoffs"] == 2
    assert not multiprocessing.active_children()


def test_a_transfer_engine_forgets_a_batch_once_it_is_freed():
    import torch

    from kda_ref.disagg import LocalTransferEngine, Region, TransferStatus
    from kda_ref.disagg.dist import DistTransferEngine

    peers = {}
    a, b = LocalTransferEngine("a", peers), LocalTransferEngine("b", peers)
    a.register("src", torch.arange(8, dtype=torch.uint8))
    b.register("dst", torch.zeros(8, dtype=torch.uint8))
    ok = a.batch_write("b", [Region("src", 0, "dst", 0, 8)])
    bad = a.batch_write("nobody", [Region("src", 0, "dst", 0, 8)])
    assert (a.status(ok), a.status(bad)) == (TransferStatus.DONE, TransferStatus.FAILED)
    assert a.free_batch(ok) is TransferStatus.DONE  # freeing returns the final status
    assert a.free_batch(bad) is TransferStatus.FAILED  # a failed batch is finished too
    for bid in (ok, bad, 99):
        with pytest.raises(ValueError, match="batch_id: no batch"):
            a.free_batch(bid)
    assert a.status(ok) is TransferStatus.FAILED  # freed: unknown
    d = DistTransferEngine(timeout=1.0)
    failed = d.batch_write(1, [Region("missing", 0, "x", 0, 4)])  # no such buffer: failed before sending
    assert d.free_batch(failed) is TransferStatus.FAILED
    with pytest.raises(ValueError, match="already freed"):
        d.free_batch(failed)


def test_the_in_process_mode_frees_every_batch_it_writes():
    d = DisaggregatedLLM(ModelConfig.micro(), seed=0)
    for p in _prompts((12, 33, 7)):
        d.add_request(p, PARAMS)
    while d.has_unfinished():
        d.step()
    te = d.prefill_tes[0]
    for bid in range(3):  # the first batches written: each freed after its status was read
        with pytest.raises(ValueError, match="already freed"):
            te.free_batch(bid)
