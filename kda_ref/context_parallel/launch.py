"""``context_parallel_prefill``: a prompt prefilled by ``R`` real processes over ``torch.distributed``.

The model's tensors reach the ranks through shared memory (nothing is saved to disk); each rank joins
a gloo group (nccl when the model is on CUDA) with a timeout, runs
:func:`~kda_ref.context_parallel.forward.rank_forward` and sends its result back. A rank that dies,
hangs or raises makes the call raise :class:`ContextParallelError` within ``timeout``, and every rank
still alive is terminated (no process is left behind). Design notes: ``docs/context_parallel.md#running-it``.
"""

from __future__ import annotations

import io
import math
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing  # noqa: F401 -- registers the tensor reductions its queues use

from ..model import HybridModel
from ..utils.limits import MAX_CP_TIMEOUT_S, MAX_WORLD_SIZE  # ranks per call: far above one machine, below a fork bomb
from ..utils.procs import (Inbox, exit_with_parent, free_port, quiet_forkserver, stop_process, terminal_signals_held,
                           worker_context, worker_process)
from .backends import backend_problem
from .comm import DistGroup, ThreadGroup
from .forward import PrefixState, RankOutput, rank_forward
from .maps import exclusive_scan


_LEFT_RUNNING: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()  # thread ranks of failed calls, until they stop


class ContextParallelError(RuntimeError):
    """A rank died, hung past the timeout, or raised; the message names which."""


class ContextParallelFallback(RuntimeWarning):
    """Warned by the engine when a context-parallel prefill failed and it prefilled the prompt in one
    process instead: the answer is still right, but the failure must not pass unseen (a rank that
    raised on a layout it should handle once hid that way). The test suite turns it into an error
    (``filterwarnings`` in ``pyproject.toml``); the tests that inject a fault expect it."""


@dataclass
class CPResult:
    """What a context-parallel prefill returns (every tensor on the CPU)."""

    logits: torch.Tensor  # [N, vocab] of every sequence's last token
    chunk_states: dict  # KDA layer -> per sequence n: (positions [nb], recurrent [nb, HV, K, V], conv [nb, 3D, W-1])
    recurrent: dict[int, torch.Tensor]  # KDA layer -> [N, HV, K, V] the state after the prompt
    conv: dict[int, torch.Tensor]  # KDA layer -> [N, 3D, W-1] the conv window after the prompt
    kv: dict[int, list[torch.Tensor]]  # MLA layer -> N x [L_n, Dc + Dp] latent rows of the new tokens
    sent_bytes: list[int]  # per rank: bytes it contributed to all-gathers
    seconds: list[float]  # per rank: wall time of its forward (after the group was up)


def _rank_main(rank: int, world_size: int, port: int, backend: str, timeout_s: float, model: HybridModel,
               token_ids, prefix, chunk_states, results) -> None:
    exit_with_parent()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # R ranks share the machine's cores
    fault = os.environ.get("KDA_CP_FAULT", "")  # tests: "die:<rank>" or "hang:<rank>"
    try:
        if backend == "nccl":  # one GPU per rank (NCCL does not run two ranks on one device)
            torch.cuda.set_device(rank % torch.cuda.device_count())
            model = model.to(f"cuda:{torch.cuda.current_device()}")
        dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s))
        if fault == f"die:{rank}":
            os._exit(3)
        if fault == f"hang:{rank}":
            time.sleep(10 * timeout_s)
        t0 = time.perf_counter()
        out = rank_forward(model, token_ids, rank, DistGroup(timedelta(seconds=timeout_s)), prefix, chunk_states)
        # as bytes: a tensor put on the queue as it is travels as a shared-memory handle that dies with
        # this process, which may exit before the parent unpickles it
        buf = io.BytesIO()
        torch.save(_to_cpu(out), buf)
        results.put((rank, "ok", buf.getvalue(), time.perf_counter() - t0))
    except Exception as err:  # noqa: BLE001 -- reported to the parent, which raises
        results.put((rank, "error", f"{type(err).__name__}: {err}", 0.0))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _to_cpu(out: RankOutput) -> RankOutput:
    cpu = lambda x: x.cpu() if isinstance(x, torch.Tensor) else x  # noqa: E731
    out.logits = {n: cpu(x) for n, x in out.logits.items()}
    out.recurrent = {k: cpu(v) for k, v in out.recurrent.items()}
    out.conv = {k: cpu(v) for k, v in out.conv.items()}
    out.kv = {k: [cpu(r) for r in v] for k, v in out.kv.items()}
    out.chunk_states = {k: {n: tuple(cpu(x) for x in t) for n, t in v.items()} for k, v in out.chunk_states.items()}
    return out


def _check(model, token_ids, world_size: int, backend: str, timeout: float, prefix,
           scan: Callable = exclusive_scan) -> list[list[int]]:
    """Every argument, before any rank starts; returns ``token_ids`` as a list of id lists."""
    if not isinstance(model, HybridModel):
        raise ValueError(f"model: expected a HybridModel, got {type(model).__name__}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"world_size: must be an int in [1, {MAX_WORLD_SIZE}], got {world_size!r}")
    why = backend_problem(backend, model.lm_head.weight.device.type)
    if why:
        raise ValueError(f"backend: {why}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or \
            not 0 < timeout <= MAX_CP_TIMEOUT_S:
        raise ValueError(f"timeout: must be a positive, finite number of seconds, at most {MAX_CP_TIMEOUT_S:g}, "
                         f"got {timeout!r}")
    if not callable(scan):
        raise ValueError(f"scan: must be a callable (maps, initial) -> (incoming, final), got {scan!r:.80}")
    if scan is not exclusive_scan and backend != "threads":  # a page's closure does not pickle into a rank
        raise ValueError(f"scan: a replacement scan runs only with backend='threads', got backend={backend!r}")
    token_ids = _as_id_lists(token_ids)
    V = model.config.vocab_size
    bad = [x for t in token_ids for x in t if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < V]
    if bad:
        raise ValueError(f"token_ids: ids must be ints in [0, {V}), got {bad[:3]}")
    if prefix is not None and (not isinstance(prefix, (list, tuple)) or len(prefix) != len(token_ids)
                               or not all(p is None or isinstance(p, PrefixState) for p in prefix)):
        raise ValueError(f"prefix: one PrefixState or None per sequence ({len(token_ids)}), got {prefix!r:.80}")
    for n, p in enumerate(prefix or []):
        if p is not None:
            p.check(model.config, name=f"prefix[{n}]")
    return token_ids


def _as_id_lists(token_ids) -> list[list[int]]:
    """``token_ids`` as N non-empty lists of ints: one prompt (a list of ids or a 1-D integer tensor)
    or a list of them."""
    def one(t):
        if isinstance(t, torch.Tensor):
            if t.dim() != 1 or t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
                raise ValueError(f"token_ids: a tensor prompt must be 1-D integer, got {t.dim()}-D {t.dtype}")
            return t.tolist()
        return t

    if isinstance(token_ids, torch.Tensor) or (isinstance(token_ids, list) and token_ids
                                               and isinstance(token_ids[0], int)):
        token_ids = [token_ids]
    if not isinstance(token_ids, (list, tuple)) or not token_ids:
        raise ValueError(f"token_ids: a non-empty list of token ids, or a list of them; got {type(token_ids).__name__}")
    token_ids = [one(t) for t in token_ids]
    if not all(isinstance(t, list) and t for t in token_ids):
        raise ValueError("token_ids: every prompt must be a non-empty list of token ids")
    return token_ids


def _merge(outs: list[RankOutput], seconds: list[float], num_seqs: int) -> CPResult:
    """One result from the ranks': each sequence's logits from the rank that held its last token, the
    chunk starts of every rank in rank (= position) order, the final states and rows (the same on
    every rank) from the last."""
    owners = [[o.logits[n] for o in outs if n in o.logits] for n in range(num_seqs)]
    if any(len(x) != 1 for x in owners):  # the layout gives every sequence exactly one last rank
        raise ContextParallelError(f"ranks reported logits for sequences {[len(x) for x in owners]} times each")
    chunks: dict = {}
    for o in outs:  # every rank's chunk starts: a rank holding none of a sequence reports none of it
        for layer, per in o.chunk_states.items():
            for n, (pos, rec, conv) in per.items():
                have = chunks.setdefault(layer, {}).setdefault(n, ([], [], []))
                for lst, x in zip(have, (pos, rec, conv)):
                    lst.append(x)
    chunks = {layer: {n: tuple(torch.cat(x) for x in v) for n, v in sorted(per.items())}
              for layer, per in chunks.items()}
    last = outs[-1]
    return CPResult(logits=torch.stack([x[0] for x in owners]), chunk_states=chunks, recurrent=last.recurrent,
                    conv=last.conv, kv=last.kv, sent_bytes=[o.sent_bytes for o in outs], seconds=seconds)


def context_parallel_prefill(model: HybridModel, token_ids, world_size: int = 2, backend: str = "gloo",
                             timeout: float = 120.0, prefix: list[PrefixState | None] | None = None,
                             chunk_states: bool = False, scan: Callable = exclusive_scan) -> CPResult:
    """Prefill ``token_ids`` (one prompt, or a list of them) split over ``world_size`` ranks.

    ``backend``: ``"gloo"`` (processes, CPU), ``"nccl"`` (processes, CUDA), ``"threads"`` (ranks as
    threads of this process: same math and bytes, no process start). ``prefix``: per sequence, the
    state a prefix-cache hit brings (:class:`~kda_ref.context_parallel.forward.PrefixState`) or ``None``.
    ``chunk_states``: cut the slices at multiples of the model's chunk size and also return every KDA
    layer's state and conv window at each chunk start (the prefix cache's checkpoints).
    ``scan``: the fold of the ranks' maps (article concept ``cp.prefix_scan``; by default
    :func:`~kda_ref.context_parallel.maps.exclusive_scan`); only ``backend="threads"`` takes a
    replacement, the process backends refuse one with a ``ValueError`` (``docs/context_parallel.md#the-page``).
    Raises :class:`ContextParallelError` when a rank fails or the ranks do not finish within
    ``timeout`` seconds."""
    token_ids = _check(model, token_ids, world_size, backend, timeout, prefix, scan)
    if backend == "threads":
        return _run_threads(model, token_ids, world_size, timeout, prefix, chunk_states, scan)
    return _run_processes(model, token_ids, world_size, backend, timeout, prefix, chunk_states)


def _run_processes(model, token_ids, world_size: int, backend: str, timeout: float, prefix,
                   chunk_states: bool) -> CPResult:
    """``world_size`` spawned ranks (gloo or nccl), each running the default scan. Each rank writes its result
    to a queue of its own, read through an :class:`~kda_ref.utils.procs.Inbox`: a rank killed while it sends
    (its result is megabytes) blocks only its queue's reader, so its death is seen and the deadline holds
    (one shared queue blocked the parent in the read for good). A rank that cannot start -- a daemonic
    process, a disaggregation worker, may not have children -- is a :class:`ContextParallelError` too, so
    the engine prefills in one process instead."""
    ctx = worker_context(backend)
    quiet_forkserver(ctx)  # a terminal's Ctrl-C reaches only this process, which stops the ranks (no tracebacks)
    results = [ctx.Queue() for _ in range(world_size)]
    port = free_port()
    procs = [worker_process(ctx, _rank_main, (r, world_size, port, backend, timeout, model, token_ids, prefix,
                                              chunk_states, results[r]), daemon=True) for r in range(world_size)]
    inbox, started, got = Inbox(dict(enumerate(results))), [], {}
    try:
        try:
            with terminal_signals_held():  # a Ctrl-C lands after the starts, every rank known to the cleanup
                for p in procs:
                    p.start()
                    started.append(p)
        except Exception as err:  # noqa: BLE001 -- whatever stops a start: the prefill falls back
            raise ContextParallelError(f"the ranks could not start: {type(err).__name__}: {err}") from None
        _collect(inbox, procs, got, world_size, timeout)
    finally:
        inbox.close()
        for p in started:
            stop_process(p, grace=5.0 if len(got) == world_size else 0.1)
        for q in results:
            q.close()
    outs = [torch.load(io.BytesIO(got[r][1]), weights_only=False) for r in range(world_size)]
    return _merge(outs, [got[r][2] for r in range(world_size)], len(token_ids))


def _collect(inbox: Inbox, procs: list, got: dict, world_size: int, timeout: float) -> None:
    """Every rank's ``(status, payload, seconds)`` into ``got``; :class:`ContextParallelError` when one
    failed or died, or past ``timeout`` (plus the processes' start and the group's set-up)."""
    deadline = time.monotonic() + timeout + 30.0
    while len(got) < world_size:
        try:
            _, (rank, status, payload, secs) = inbox.get(timeout=0.5)
            got[rank] = (status, payload, secs)
            if status == "error":
                raise ContextParallelError(_failure(procs, got, rank, payload))
        except queue.Empty:
            dead = _dead_ranks(procs, got)
            if dead:
                raise ContextParallelError(f"rank {dead[0]} died (exit code {procs[dead[0]].exitcode})") from None
            if time.monotonic() > deadline:
                missing = sorted(set(range(world_size)) - set(got))
                raise ContextParallelError(f"ranks {missing} did not finish within {timeout:g} s") from None


def _dead_ranks(procs: list, got: dict) -> list[int]:
    """The ranks whose process ended with an error before it reported (``got`` holds who reported)."""
    return [r for r, p in enumerate(procs) if r not in got and p.exitcode not in (None, 0)]


def _failure(procs: list, got: dict, rank: int, payload: str, wait: float = 1.0) -> str:
    """The message of ``rank``'s reported failure. A peer that died is the cause -- its death fails the
    survivors' next collective, and a survivor's report may arrive before the death is seen -- so the message
    names it first, after up to ``wait`` seconds for its exit code."""
    end = time.monotonic() + wait
    while not (dead := _dead_ranks(procs, got)) and time.monotonic() < end:
        time.sleep(0.05)
    if dead:
        return f"rank {dead[0]} died (exit code {procs[dead[0]].exitcode}); rank {rank} then failed: {payload}"
    return f"rank {rank} failed: {payload}"


def _run_threads(model, token_ids, world_size: int, timeout: float, prefix, chunk_states: bool,
                 scan: Callable = exclusive_scan) -> CPResult:
    group = ThreadGroup(world_size, timedelta(seconds=timeout))
    outs: list = [None] * world_size
    secs = [0.0] * world_size
    errors: list[str] = []

    def run(r: int) -> None:
        t0 = time.perf_counter()
        try:
            outs[r] = rank_forward(model, token_ids, r, group.rank_view(r), prefix, chunk_states, scan)
        except Exception as err:  # noqa: BLE001
            errors.append(f"rank {r} failed: {type(err).__name__}: {err}")
            group.abort()
        secs[r] = time.perf_counter() - t0

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(world_size)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout  # one for all the ranks (a join each waited world_size x timeout)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if errors or any(t.is_alive() for t in threads):
        group.abort()  # each rank raises at its next collective (a thread cannot be killed)
        _LEFT_RUNNING.update(t for t in threads if t.is_alive())
        raise ContextParallelError(errors[0] if errors else f"ranks did not finish within {timeout:g} s")
    return _merge(outs, secs, len(token_ids))


def wait_for_thread_ranks(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the thread ranks of failed calls to stop (aborted, each stops at its
    next collective); whether none is left. A program must not exit while one is inside torch -- the process
    aborts ("terminate called without an active exception") --, so ``kda-ref cp`` calls it before it exits."""
    end = time.monotonic() + timeout
    for t in list(_LEFT_RUNNING):
        t.join(max(0.0, end - time.monotonic()))
    return not any(t.is_alive() for t in _LEFT_RUNNING)
