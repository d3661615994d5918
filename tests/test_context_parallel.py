"""Context-parallel prefill (KCP, :mod:`kda_ref.context_parallel`): the segment maps and their scan in float64,
one rank's forward against the single-process model (ranks as threads and as real gloo processes),
a prefix-cache hit entering rank 0, and faults: a dead or hung rank is an error within the timeout
and leaves no process behind."""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import time

import pytest
import torch

from kda_ref.model import HybridModel, ModelConfig, RequestCache
from kda_ref.ops import l2norm, recurrent_kda
from kda_ref.context_parallel import (CPLayout, ContextParallelError, PrefixState, apply_map, chunk_maps, compose,
                              context_parallel_prefill, exclusive_scan, identity_map, pack, segment_map,
                              segment_map_reference, unpack)

CFG = ModelConfig.micro()
F64 = torch.float64


def _inputs(T, H=2, K=8, V=6, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    k = l2norm(torch.randn(T, H, K, generator=g, dtype=dtype))
    v = torch.randn(T, H, V, generator=g, dtype=dtype)
    gate = -torch.rand(T, H, K, generator=g, dtype=dtype) * 0.7  # log decay
    beta = torch.rand(T, H, generator=g, dtype=dtype)
    return k, v, gate, beta


def _recurrence(k, v, g, beta, S0):
    """The state after the tokens, from S0, by the reference recurrence."""
    q = torch.zeros_like(k)[None]
    _, fin = recurrent_kda(q, k[None], v[None], g[None], beta[None], initial_state=S0[None], output_final_state=True)
    return fin[0]


# ---- the maps ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("T,C", [(37, 16), (64, 16), (5, 64)])  # not a multiple of the chunk; exact; shorter
def test_chunk_map_equals_token_map_and_the_recurrence_in_float64(T, C):
    k, v, g, beta = _inputs(T)
    S0 = torch.randn(2, 8, 6, dtype=F64, generator=torch.Generator().manual_seed(9))
    ref = segment_map_reference(k, v, g, beta)
    fast = segment_map(k, v, g, beta, chunk_size=C)
    for a, b in zip(ref, fast):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    torch.testing.assert_close(apply_map(fast, S0), _recurrence(k, v, g, beta, S0), atol=1e-10, rtol=0)


def test_maps_compose_latest_on_the_left_and_the_scan_gives_every_boundary_state():
    k, v, g, beta = _inputs(50, seed=1)
    S0 = torch.randn(2, 8, 6, dtype=F64, generator=torch.Generator().manual_seed(2))
    cuts = [0, 11, 12, 30, 50]  # segments of 11, 1, 18, 20 tokens
    maps = [segment_map(k[a:b], v[a:b], g[a:b], beta[a:b], chunk_size=8) for a, b in zip(cuts, cuts[1:])]
    incoming, final = exclusive_scan(maps, S0)
    for (a, _), s_in in zip(zip(cuts, cuts[1:]), incoming):
        want = S0 if a == 0 else _recurrence(k[:a], v[:a], g[:a], beta[:a], S0)
        torch.testing.assert_close(s_in, want, atol=1e-10, rtol=0)
    torch.testing.assert_close(final, _recurrence(k, v, g, beta, S0), atol=1e-10, rtol=0)
    whole = maps[0]
    for m in maps[1:]:
        whole = compose(m, whole)
    for a, b in zip(whole, segment_map_reference(k, v, g, beta)):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)
    # the other order is another map: composing earlier-on-the-left is wrong
    wrong = compose(maps[0], maps[1])
    assert (apply_map(wrong, S0) - apply_map(compose(maps[1], maps[0]), S0)).abs().max() > 1e-3


def test_states_do_not_add():
    """The tempting shortcut -- every segment from zero, states summed -- is not the state."""
    k, v, g, beta = _inputs(40, seed=3)
    a = segment_map(k[:20], v[:20], g[:20], beta[:20], chunk_size=8)
    b = segment_map(k[20:], v[20:], g[20:], beta[20:], chunk_size=8)
    zero = torch.zeros(2, 8, 6, dtype=F64)
    true = _recurrence(k, v, g, beta, zero)
    assert (apply_map(a, zero) + apply_map(b, zero) - true).abs().max() > 1e-2
    torch.testing.assert_close(apply_map(b, apply_map(a, zero)), true, atol=1e-10, rtol=0)


def test_identity_and_packing():
    m = identity_map(2, 4, 3, dtype=F64)
    S = torch.randn(2, 4, 3, dtype=F64)
    assert torch.equal(apply_map(m, S), S)
    k, v, g, beta = _inputs(9)
    mm = segment_map(k, v, g, beta, chunk_size=4)
    hm = pack(mm)
    assert hm.shape == (2, 8, 6 + 8)  # fla's [HV, K, V + K]
    assert torch.equal(hm[..., :6], mm[1]) and torch.equal(hm[..., 6:], mm[0])  # [S | M]: the state columns first
    assert all(torch.equal(x, y) for x, y in zip(unpack(hm), mm))
    M, b = chunk_maps(k, v, g, beta, chunk_size=4)
    assert M.shape == (3, 2, 8, 8) and b.shape == (3, 2, 8, 6)  # 9 tokens: 3 chunks of 4, the last padded


def test_layout_splits_every_sequence_contiguously():
    lay = CPLayout([10, 2, 7], 3)
    assert [lay.shard_lens(r) for r in range(3)] == [[3, 0, 2], [3, 1, 2], [4, 1, 3]]
    for n, L in enumerate(lay.seq_lens):
        assert [lay.bounds(n, r) for r in range(3)][-1][1] == L  # the last token is on the last rank


# ---- the whole model --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=0).eval()


def _tokens(lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (L,), generator=g).tolist() for L in lens]


def _single(model, prompts, cache=None, seq_ids=None):
    """The single-process prefill: last-token logits, and the cache holding every state."""
    cache = cache or RequestCache(model.config, len(prompts), max_tokens=256, page_size=16)
    b = cache.batch([len(p) for p in prompts], seq_ids=seq_ids)
    with torch.no_grad():
        logits = model(torch.tensor([x for p in prompts for x in p]), b, cache.tensors, logits="last")
    cache.advance(b, seq_ids)
    return logits, cache


def _assert_same(res, logits, cache, lens, start=None):
    start = start or [0] * len(lens)
    t = cache.tensors
    torch.testing.assert_close(res.logits, logits, atol=1e-4, rtol=0)
    for layer in CFG.kda_layer_ids:
        li = t.kda_index[layer]
        torch.testing.assert_close(res.recurrent[layer], t.recurrent[li, 1:1 + len(lens)], atol=1e-4, rtol=0)
        torch.testing.assert_close(res.conv[layer], t.conv[li, 1:1 + len(lens)], atol=1e-4, rtol=0)
    for layer in CFG.mla_layer_ids:
        mi = t.mla_index[layer]
        for n, L in enumerate(lens):
            pos = torch.arange(start[n], start[n] + L)
            rows = t.kv[mi][cache._block_table[n, pos // 16], pos % 16]
            torch.testing.assert_close(res.kv[layer][n], rows, atol=1e-4, rtol=0)


@pytest.mark.parametrize("R", [2, 3])
def test_threaded_ranks_equal_the_single_process_prefill(model, R):
    lens = [70, 2, 33]  # one sequence shorter than R: an empty slice on some rank; none divisible by R or 64
    prompts = _tokens(lens)
    logits, cache = _single(model, prompts)
    res = context_parallel_prefill(model, prompts, world_size=R, backend="threads")
    _assert_same(res, logits, cache, lens)
    assert len(res.sent_bytes) == R and len(set(res.sent_bytes)) == 1 and res.sent_bytes[0] > 0


def test_a_prefix_cache_hit_enters_rank_0(model):
    """The first 40 tokens are cached (state, conv window, latent KV); the other 45 are prefilled over
    2 ranks starting from them, and match the single process continuing the same cache."""
    full = _tokens([85], seed=4)[0]
    head, tail = full[:40], full[40:]
    _, cache = _single(model, [head])
    t = cache.tensors
    prefix = PrefixState(
        recurrent={layer: t.recurrent[t.kda_index[layer], 1].clone() for layer in CFG.kda_layer_ids},
        conv={layer: t.conv[t.kda_index[layer], 1].clone() for layer in CFG.kda_layer_ids},
        kv={layer: t.kv[t.mla_index[layer]][cache._block_table[0, torch.arange(40) // 16], torch.arange(40) % 16].clone()
            for layer in CFG.mla_layer_ids})
    res = context_parallel_prefill(model, [tail], world_size=2, backend="threads", prefix=[prefix])
    logits, cache = _single(model, [tail], cache=cache)
    _assert_same(res, logits, cache, [45], start=[40])


@pytest.mark.slow  # gloo processes in the default run: test_llm_context_parallel_over_real_processes
def test_real_gloo_processes_give_the_threads_answer(model):
    prompts = _tokens([70, 2, 33], seed=1)
    threads = context_parallel_prefill(model, prompts, world_size=2, backend="threads")
    procs = context_parallel_prefill(model, prompts, world_size=2, backend="gloo", timeout=60)
    torch.testing.assert_close(procs.logits, threads.logits, atol=1e-6, rtol=0)
    for layer in CFG.kda_layer_ids:
        torch.testing.assert_close(procs.recurrent[layer], threads.recurrent[layer], atol=1e-6, rtol=0)
    assert procs.sent_bytes == threads.sent_bytes
    assert not multiprocessing.active_children()


@pytest.mark.slow
def test_three_gloo_processes_equal_the_single_process_prefill(model):
    lens = [70, 2, 33]
    prompts = _tokens(lens, seed=2)
    logits, cache = _single(model, prompts)
    res = context_parallel_prefill(model, prompts, world_size=3, backend="gloo", timeout=60)
    _assert_same(res, logits, cache, lens)
    assert not multiprocessing.active_children()


# ---- faults -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fault,blamed", [("die:1", "rank 1 died"),  # not rank 0, whose collective it broke
                                          pytest.param("hang:1", "rank", marks=pytest.mark.slow)])
def test_a_dead_or_hung_rank_is_an_error_within_the_timeout(model, monkeypatch, fault, blamed):
    monkeypatch.setenv("KDA_CP_FAULT", fault)
    t0 = time.monotonic()
    with pytest.raises(ContextParallelError, match=blamed):
        context_parallel_prefill(model, _tokens([40]), world_size=2, backend="gloo", timeout=5)
    assert time.monotonic() - t0 < 5 + 30  # the collective's timeout plus process start-up
    assert not multiprocessing.active_children()  # nothing left behind


def test_a_failing_thread_rank_stops_the_others(model, monkeypatch):
    from kda_ref.context_parallel import forward

    real = forward._mla

    def broken(attn, x, lens, layout, rank, group, prefix, out):
        if rank == 1:
            raise RuntimeError("injected")
        return real(attn, x, lens, layout, rank, group, prefix, out)

    monkeypatch.setattr(forward, "_mla", broken)
    t0 = time.monotonic()
    with pytest.raises(ContextParallelError, match="rank 1 failed.*injected"):
        context_parallel_prefill(model, _tokens([30]), world_size=2, backend="threads", timeout=20)
    assert time.monotonic() - t0 < 20


def test_hung_thread_ranks_are_an_error_within_one_timeout(model, monkeypatch):
    """The threads backend waited for each rank in turn, the whole timeout each: three hung ranks of four
    raised after three timeouts. One deadline holds for them all."""
    import threading

    from kda_ref.context_parallel import forward

    real, release = forward._mla, threading.Event()

    def hung(attn, x, lens, layout, rank, group, prefix, out):
        if rank >= 1:
            release.wait(60)  # a stuck kernel or lock, outside any collective
        return real(attn, x, lens, layout, rank, group, prefix, out)

    monkeypatch.setattr(forward, "_mla", hung)
    t0 = time.monotonic()
    try:
        with pytest.raises(ContextParallelError, match="did not finish within"):
            context_parallel_prefill(model, _tokens([40]), world_size=4, backend="threads", timeout=1.5)
        assert time.monotonic() - t0 < 2 * 1.5
    finally:
        release.set()


@pytest.mark.parametrize("kw,match", [
    (dict(world_size=0), "world_size"), (dict(world_size=True), "world_size"), (dict(backend="mpi"), "backend"),
    (dict(timeout=0), "timeout"), (dict(backend="nccl"), "nccl"), (dict(token_ids=[]), "token_ids"), (dict(token_ids=[[1, 2], []]), "token_ids"),
    (dict(token_ids=[[1, 999]]), "token_ids"), (dict(timeout=float("nan")), "timeout"), (dict(timeout=True), "timeout"),
    (dict(timeout=float("inf")), "timeout"), (dict(world_size=65), "world_size"),
    (dict(token_ids=torch.ones(2, 3, dtype=torch.long)), "token_ids: a tensor prompt must be 1-D"),
    (dict(token_ids=torch.ones(3)), "token_ids: a tensor prompt must be 1-D integer"),
    (dict(prefix=[None, None]), "prefix: one PrefixState or None per sequence"),
    (dict(prefix=[PrefixState(recurrent={}, conv={}, kv={})]), r"prefix\[0\]: recurrent must map"),
])
def test_bad_arguments_are_named(model, kw, match):
    args = dict(token_ids=[[1, 2, 3]], world_size=2, backend="threads")
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        context_parallel_prefill(model, **args)
    with pytest.raises(ValueError, match="model"):
        context_parallel_prefill("tiny", [[1, 2]])


@pytest.mark.parametrize("timeout", [float("nan"), True])
def test_a_bad_timeout_is_refused_before_any_process_starts(model, monkeypatch, timeout):
    from kda_ref.context_parallel import launch

    monkeypatch.setattr(launch, "worker_context", lambda *a: pytest.fail("a process was about to start"))
    with pytest.raises(ValueError, match="^timeout: "):
        context_parallel_prefill(model, [[1, 2, 3]], world_size=2, backend="gloo", timeout=timeout)
    assert not multiprocessing.active_children()


def test_a_1d_tensor_is_one_prompt(model):
    ids = _tokens([40], seed=8)[0]
    a = context_parallel_prefill(model, torch.tensor(ids), world_size=2, backend="threads")
    b = context_parallel_prefill(model, [ids], world_size=2, backend="threads")
    assert torch.equal(a.logits, b.logits) and a.logits.shape == (1, CFG.vocab_size)


def test_a_prefix_state_of_the_wrong_shape_is_named(model):
    full = _tokens([30], seed=9)[0]
    _, cache = _single(model, [full[:10]])
    good = {la: cache.states(0, la)[0].clone() for la in CFG.kda_layer_ids}
    bad = PrefixState(recurrent={**good, CFG.kda_layer_ids[0]: torch.zeros(3, 3)},
                      conv={la: cache.states(0, la)[1].clone() for la in CFG.kda_layer_ids},
                      kv={la: cache.kv_rows(0, la).clone() for la in CFG.mla_layer_ids})
    with pytest.raises(ValueError, match=rf"prefix\[0\]: recurrent\[{CFG.kda_layer_ids[0]}\] must be a tensor of shape"):
        context_parallel_prefill(model, [full[10:]], world_size=2, backend="threads", prefix=[bad])


# ---- the command line -------------------------------------------------------------------------------
def test_cli_cp_prints_each_rank_and_the_distance_to_one_process(tmp_path, capsys):
    from kda_ref.cli import main

    f = tmp_path / "p.txt"
    f.write_text("KDA states do not add. " * 12, encoding="utf-8")
    assert main(["cp", "--ranks", "3", "--prompt-file", str(f), "--model", "random-tiny", "--backend", "threads"]) == 0
    out = capsys.readouterr().out
    assert "277 prompt tokens over 3 ranks (threads)" in out  # BOS + 276 bytes
    assert "[     0,     92)" in out and "[   184,    277)" in out
    dist = float(out.rsplit("= ", 1)[1])
    assert dist < 1e-4


@pytest.mark.parametrize("args,msg", [(["--ranks", "0"], "--ranks"), (["--timeout", "0"], "--timeout"),
                                      (["--prompt-file", "/nonexistent/p.txt"], "--prompt-file")])
def test_cli_cp_bad_input_exits_2(tmp_path, capsys, args, msg):
    from kda_ref.cli import main

    f = tmp_path / "p.txt"
    f.write_text("abc", encoding="utf-8")
    argv = ["cp", "--prompt-file", str(f), "--model", "random-tiny", "--backend", "threads", *args]
    assert main(argv) == 2
    assert msg in capsys.readouterr().err


def test_measured_bytes_follow_the_arithmetic(model):
    """One sequence, T divisible by R: a rank sends its maps, conv tails (and their counts) and latent
    rows -- what :func:`kda_ref.context_parallel.volume.cp_bytes_per_rank` predicts (fp32 activations here)."""
    from kda_ref.context_parallel.volume import cp_bytes_per_rank

    res = context_parallel_prefill(model, _tokens([96], seed=5), world_size=2, backend="threads")
    want = cp_bytes_per_rank(CFG, 96, 2, act_bytes=4)
    counts = len(CFG.kda_layer_ids) * 8  # one int64 count per sequence and KDA layer
    assert res.sent_bytes == [want["total"] + counts] * 2
    assert want["kda_inputs_instead"] > want["kda_maps"]


# ---- in the engine ----------------------------------------------------------------------------------
def _engine_prompts():
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 256, (L,), generator=g).tolist() for L in (90, 10, 70)]



def _generate(prompts, **kw):
    from kda_ref import LLM, SamplingParams

    llm = LLM(ModelConfig.micro(), seed=0, **kw)
    outs = llm.generate(prompts, SamplingParams(max_tokens=8, ignore_eos=True, return_logits=True), use_tqdm=False)
    return outs, llm


def test_llm_prefills_long_prompts_over_the_ranks_and_decodes_the_same_tokens():
    prompts = _engine_prompts()
    plain, _ = _generate(prompts)
    cp, llm = _generate(prompts, context_parallel_size=2, cp_min_tokens=32, cp_backend="threads")
    for a, b in zip(plain, cp):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=0)
    s = llm.stats()
    assert s["cp_prefills"] == 2 and s["cp_fallbacks"] == 0 and s["cp_sent_bytes"] > 0  # 90 and 70, not 10
    assert llm.pool.is_empty()


def test_a_context_parallel_step_tells_the_trace_what_its_kda_layers_ran():
    """The ranks run the KDA layers with dispatchers of their own (no trace hook): the runner reports each
    KDA layer's chunk form over the item's tokens, so the chain page's grid does not call them "not run"."""
    from kda_ref.engine.runner import CP_KERNEL
    from kda_ref.trace import TraceRecorder

    rec = TraceRecorder()
    prompts = _engine_prompts()
    _, llm = _generate(prompts, context_parallel_size=2, cp_min_tokens=32, cp_backend="threads", tracer=rec)
    cp = [e for e in rec.events_of("kernel_dispatch") if e.kernel == CP_KERNEL]
    assert sorted(e.num_tokens for e in cp) == sorted(L for L in (90, 70) for _ in llm.config.kda_layer_ids)
    assert {e.layer for e in cp} == set(llm.config.kda_layer_ids) and all(e.phase == "extend" for e in cp)
    assert all(e.backend == "threads" and e.num_seqs == 1 for e in cp)


def test_llm_context_parallel_over_real_processes():
    prompts = _engine_prompts()[:1]
    plain, _ = _generate(prompts)
    cp, llm = _generate(prompts, context_parallel_size=2, cp_min_tokens=32, cp_backend="gloo", cp_timeout=60)
    assert cp[0].token_ids == plain[0].token_ids
    assert llm.stats()["cp_prefills"] == 1 and not multiprocessing.active_children()


def test_a_prefix_cache_hit_is_prefilled_from_the_cached_state():
    """The second prompt shares the first one's 64-token prefix: the radix cache restores it and the
    ranks prefill only the rest, starting from the restored state, conv window and KV."""
    g = torch.Generator().manual_seed(3)
    shared = torch.randint(0, 256, (64,), generator=g).tolist()
    prompts = [shared + torch.randint(0, 256, (40,), generator=g).tolist(),
               shared + torch.randint(0, 256, (50,), generator=g).tolist()]
    plain, _ = _generate(prompts, prefix_cache="radix")
    from kda_ref import LLM, SamplingParams

    llm = LLM(ModelConfig.micro(), seed=0, prefix_cache="radix", context_parallel_size=2, cp_min_tokens=32,
              cp_backend="threads")
    params = SamplingParams(max_tokens=8, ignore_eos=True, return_logits=True)
    outs = [llm.generate([p], params, use_tqdm=False)[0] for p in prompts]  # one after the other: a hit
    assert llm.stats()["cached_prompt_tokens"] >= 64
    for a, b in zip(plain, outs):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=0)
    assert llm.stats()["cp_prefills"] == 2


def test_a_prompt_cut_at_a_junction_runs_its_rest_over_the_ranks_too():
    """B shares 150 tokens with A: the block cache (``align``) wants a state where B leaves A (block 128),
    so B's admission runs 128 tokens over the ranks; the 448 after them up to B's last block boundary,
    still at least ``cp_min_tokens``, run over the ranks in the next step (not in one process, chunk by
    chunk); the 24-token tail in one process. Same answers and cache hits as one process."""
    g = torch.Generator().manual_seed(7)
    a = torch.randint(0, 256, (200,), generator=g).tolist()
    b = a[:150] + torch.randint(0, 256, (450,), generator=g).tolist()
    from kda_ref import LLM, SamplingParams

    params = SamplingParams(max_tokens=4, ignore_eos=True)
    runs = []
    for kw in ({}, dict(context_parallel_size=2, cp_min_tokens=128, cp_backend="threads")):
        llm = LLM(ModelConfig.micro(), seed=0, prefix_cache="block", **kw)
        runs.append(([llm.generate([p], params, use_tqdm=False)[0].token_ids for p in (a, b)], llm.stats()))
    (plain, s1), (cp, s2) = runs
    assert cp == plain and s2["cached_prompt_tokens"] == s1["cached_prompt_tokens"]
    assert s2["cp_prefills"] == 3 and s2["cp_fallbacks"] == 0  # A once; B's 128, then its next 448


def test_a_failed_part_falls_back_for_its_step_only(monkeypatch):
    """The ranks fail on B's first part (to the junction): that step is prefilled in one process, with a
    warning, and B's next part goes over the ranks again; the answers are the single process's."""
    from kda_ref import LLM, SamplingParams
    from kda_ref.context_parallel import ContextParallelError, ContextParallelFallback
    from kda_ref.engine import runner

    g = torch.Generator().manual_seed(7)
    a = torch.randint(0, 256, (200,), generator=g).tolist()
    b = a[:150] + torch.randint(0, 256, (450,), generator=g).tolist()
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    plain = LLM(ModelConfig.micro(), seed=0, prefix_cache="block").generate([a, b], params, use_tqdm=False)
    real, calls = runner.context_parallel_prefill, []

    def second_call_fails(*args, **kwargs):
        calls.append(len(args[1][0]))
        if len(calls) == 2:
            raise ContextParallelError("rank 1 did not answer (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "context_parallel_prefill", second_call_fails)
    llm = LLM(ModelConfig.micro(), seed=0, prefix_cache="block", context_parallel_size=2, cp_min_tokens=128,
              cp_backend="threads")
    with pytest.warns(ContextParallelFallback, match="injected"):
        cp = [llm.generate([p], params, use_tqdm=False)[0] for p in (a, b)]
    assert [o.token_ids for o in cp] == [o.token_ids for o in plain] and calls == [192, 128, 448]
    s = llm.stats()
    assert s["cp_fallbacks"] == 1 and s["cp_prefills"] == 2


def test_chunk_aligned_prompts_with_the_radix_cache_run_over_the_ranks():
    """The radix cache asks the ranks for chunk-start states, so the cuts fall on chunk multiples: a
    64-token prompt over 2 ranks lies wholly on rank 0, rank 1 holds nothing. It runs over the ranks
    (no fallback: a fallback warns, and the suite makes that warning an error) and answers as one
    process does."""
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 256, (L,), generator=g).tolist() for L in (64, 128, 65)]
    plain, _ = _generate(prompts, prefix_cache="radix")
    cp, llm = _generate(prompts, prefix_cache="radix", context_parallel_size=2, cp_min_tokens=32,
                        cp_backend="threads")
    for a, b in zip(plain, cp):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(a.logits, b.logits, atol=1e-4, rtol=0)
    s = llm.stats()
    assert s["cp_prefills"] == 3 and s["cp_fallbacks"] == 0


def test_a_dead_rank_falls_back_to_a_single_process_prefill(monkeypatch):
    from kda_ref.context_parallel import ContextParallelFallback

    monkeypatch.setenv("KDA_CP_FAULT", "die:1")
    prompts = _engine_prompts()[:1]
    with pytest.warns(ContextParallelFallback, match="rank"):
        cp, llm = _generate(prompts, context_parallel_size=2, cp_min_tokens=32, cp_backend="gloo", cp_timeout=5)
    monkeypatch.delenv("KDA_CP_FAULT")
    plain, _ = _generate(prompts)
    assert cp[0].token_ids == plain[0].token_ids  # the engine prefilled it itself
    s = llm.stats()
    assert s["cp_fallbacks"] == 1 and s["cp_prefills"] == 0 and "rank" in llm.runner.cp_last_error
    assert llm.pool.is_empty() and not multiprocessing.active_children()


@pytest.mark.parametrize("kw,match", [
    (dict(context_parallel_size=0), "context_parallel_size"), (dict(cp_min_tokens=0), "cp_min_tokens"),
    (dict(cp_backend="mpi"), "cp_backend"), (dict(cp_timeout=-1), "cp_timeout"), (dict(cp_timeout=True), "cp_timeout"),
])
def test_llm_context_parallel_arguments_are_checked(kw, match):
    from kda_ref import LLM

    with pytest.raises(ValueError, match=match):
        LLM(ModelConfig.micro(), **kw)


def test_chunk_start_states_are_the_single_process_ones(model):
    """With ``chunk_states=True`` the slices are cut at chunk multiples and every rank reports the state
    and conv window at its chunk starts: together, the single-process chunk kernel's checkpoints."""
    prompt = _tokens([150], seed=6)[0]
    cache = RequestCache(CFG, 1, max_tokens=256, page_size=16)
    b = cache.batch([150], return_chunk_states=True)
    with torch.no_grad():
        ref = model.forward_output(torch.tensor(prompt), b, cache.tensors, logits="last")
    res = context_parallel_prefill(model, [prompt], world_size=3, backend="threads", chunk_states=True)
    C = model.dispatcher.chunk_size
    for layer in CFG.kda_layer_ids:
        pos, rec, conv = res.chunk_states[layer][0]
        want = ref.chunk_states[layer]
        assert pos.tolist() == want.positions[0].tolist() == list(range(0, 150, C))
        torch.testing.assert_close(rec, want.recurrent, atol=1e-4, rtol=0)
        torch.testing.assert_close(conv, want.conv, atol=1e-5, rtol=0)
    assert [CPLayout([150], 3, align=C).bounds(0, r) for r in range(3)] == [(0, 64), (64, 128), (128, 150)]


@pytest.mark.slow  # the rank forward over real processes in the default run: test_llm_context_parallel_over_...
def test_the_same_forward_runs_under_torchrun(tmp_path):
    """torchrun starts the ranks itself; the last rank prints the next token, which is the single
    process's greedy token (its default model: the random tiny one)."""
    import subprocess
    import sys

    f = tmp_path / "p.txt"
    f.write_text("torchrun starts the ranks. " * 4, encoding="utf-8")
    torchrun = pathlib.Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to this Python")
    proc = subprocess.run([str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "kda_ref.context_parallel.torchrun",
                           "--prompt-file", str(f), "--timeout", "60"], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    from kda_ref.tokenizer import ByteTokenizer

    ids = [CFG.bos_token_id, *ByteTokenizer().encode(f.read_text(encoding="utf-8"))]
    logits, _ = _single(HybridModel(ModelConfig.tiny(), seed=0).eval(), [ids])
    assert f"next token {int(logits[0].argmax())}" in proc.stdout
    assert f"{len(ids)} tokens over 2 ranks (gloo)" in proc.stdout


def test_stopping_a_worker_that_never_started_is_a_no_op():
    """A failed start leaves later workers unstarted; the clean-up that stops every worker (a
    context-parallel prefill's, disaggregation's shutdown) joined them and raised over the first error."""
    from kda_ref.utils.procs import stop_process, worker_context

    proc = worker_context("gloo").Process(target=time.sleep, args=(0,))
    stop_process(proc, grace=0.1)
    assert proc.pid is None and proc.exitcode is None


@pytest.mark.parametrize("mode", ["align", "all"])
def test_the_block_cache_keeps_its_states_through_a_context_parallel_prefill(mode):
    """A context-parallel admission is still cut where the block cache wants a state (in ``align`` mode its
    last block boundary), so a later prompt that extends this one hits the cache as it does in one process,
    with the same answers."""
    g = torch.Generator().manual_seed(3)
    first = torch.randint(0, 256, (340,), generator=g).tolist()
    prompts = [first, first + torch.randint(0, 256, (50,), generator=g).tolist()]
    from kda_ref import LLM, SamplingParams

    params = SamplingParams(max_tokens=4, ignore_eos=True)
    runs = []
    for kw in ({}, dict(context_parallel_size=2, cp_min_tokens=32, cp_backend="threads")):
        llm = LLM(ModelConfig.micro(), seed=0, prefix_cache="block", mamba_cache_mode=mode, **kw)
        runs.append(([llm.generate([p], params, use_tqdm=False)[0].token_ids for p in prompts], llm.stats()))
    (plain, s1), (cp, s2) = runs
    assert cp == plain and s2["cp_prefills"] == 2
    assert s2["cached_prompt_tokens"] == s1["cached_prompt_tokens"] == 320


_PARENT = r"""
import json, multiprocessing, sys, threading, time
sys.path.insert(0, sys.argv[2])
from kda_ref import ModelConfig
from kda_ref.model import HybridModel
kind, out = sys.argv[1], sys.argv[3]

def report(pids):
    with open(out + ".tmp", "w") as f:
        json.dump(pids, f)
    import os
    os.replace(out + ".tmp", out)

if kind == "cp":  # rank 1 hangs, rank 0 waits in a collective: both would outlive a killed parent by minutes
    from kda_ref.context_parallel import context_parallel_prefill
    def watch():
        while len(multiprocessing.active_children()) < 2:
            time.sleep(0.05)
        report([p.pid for p in multiprocessing.active_children()])
    threading.Thread(target=watch, daemon=True).start()
    context_parallel_prefill(HybridModel(ModelConfig.tiny(), seed=0), list(range(1, 60)), world_size=2, timeout=120)
else:  # disaggregation: started workers that wait for requests
    from kda_ref.disagg import DisaggregatedLLM
    d = DisaggregatedLLM(ModelConfig.micro(), transfer="dist", timeout=30)
    d.start()
    report([p.pid for p in multiprocessing.active_children()])
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie nobody reaps, as an orphan may be in a container, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("kind", ["cp", pytest.param("pd", marks=pytest.mark.slow)])
def test_workers_do_not_outlive_a_killed_parent(tmp_path, monkeypatch, kind):
    """The parent SIGKILLed (no cleanup of its own runs): its context-parallel ranks and disaggregation workers
    exit within seconds instead of running on (a rank blocked for good, a worker serving nobody)."""
    import json
    import signal
    import subprocess
    import sys
    from pathlib import Path

    if kind == "cp":
        monkeypatch.setenv("KDA_CP_FAULT", "hang:1")
    out = tmp_path / "pids.json"
    log = tmp_path / "parent.log"  # its stderr (a killed parent's resource tracker warns of the queues it frees)
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", _PARENT, kind, str(Path(__file__).parents[1]), str(out)],
                                stderr=err)
    try:
        deadline = time.monotonic() + 120
        while not out.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert out.exists(), log.read_text()[-2000:]
        pids = json.loads(out.read_text())
        assert len(pids) == 2 and all(_alive(p) for p in pids)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if _alive(p)]
    for p in left:  # the test leaves nothing behind either way
        os.kill(p, signal.SIGKILL)
    assert not left
