"""Disaggregation across processes: prefill workers and decode workers, each an engine in its own
process, the handoff's bytes moved by ``torch.distributed`` point-to-point (gloo on CPUs, nccl when
the model is on CUDA).

``DisaggregatedLLM(model, transfer="dist", num_prefill=P, num_decode=D)`` runs this: ranks ``0..P-1``
prefill, ``P..P+D-1`` decode. The parent only routes (:class:`~kda_ref.disagg.router.Router`): a
request goes to a prefill worker together with the decode rank chosen for it, or straight to a decode
worker that holds the state it continues. A prefill worker announces each send on the decode worker's
control queue -- the KV rows a chunk finished, then the last send with the manifest -- and sends the
bytes with a tag of their own (:class:`DistTransferEngine`); the decode worker receives them into the
request's receive buffer, checks and installs the handoff (or prefills the prompt itself), decodes,
and reports outputs and per-handoff bytes to the parent.

Failures, each bounded by ``timeout``: a receive that does not complete (a prefill worker dead or
hung mid-transfer) makes the decode worker prefill that request itself and tell the parent, which
kills that prefill worker, tells every decode worker to stop waiting for it, and hands the requests it
still held to their decode workers to prefill; a prefill worker that exits or falls silent while it
has work is treated the same way. A decode worker that dies is a :class:`DisaggregationError`. Every
process is stopped by :meth:`DistCluster.shutdown` (and by a finalizer when the owner is collected).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import queue
import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..engine import LLM, SamplingParams
from .handoff import layout
from .install import handoff_info, install_or_recompute
from .llm import DisaggregationError, prefill_params
from .stream import Outbound, pack
from .transfer import TransferStatus

HEARTBEAT_S = 0.5


def silence_limit(timeout: float) -> float:
    """Seconds a worker with work may stay silent before it is taken for dead: a prefill worker can
    legitimately wait one receive timeout of its decode worker (busy with another sender) on a send."""
    return max(2 * timeout, timeout + 5.0)


class DistTransferEngine:
    """Registered buffers and byte ranges over ``torch.distributed`` point-to-point. Every transfer has
    a tag of its own: a receive that timed out stays posted (neither gloo nor nccl can cancel it), so
    its buffer is kept alive here and no later transfer can match it."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.buffers: dict[str, torch.Tensor] = {}
        self._abandoned: list[torch.Tensor] = []
        self.bytes_sent = 0

    def register(self, name: str, buf: torch.Tensor) -> None:
        self.buffers[name] = buf.view(-1).view(torch.uint8)

    def unregister(self, name: str) -> None:
        self.buffers.pop(name, None)

    def send(self, name: str, peer: int, tag: int) -> TransferStatus:
        buf = self.buffers[name]
        try:
            dist.send(buf, dst=peer, tag=tag)
        except RuntimeError:
            return TransferStatus.FAILED
        self.bytes_sent += buf.numel()
        return TransferStatus.DONE

    def receive(self, name: str, peer: int, tag: int) -> TransferStatus:
        buf = self.buffers[name]
        try:
            ok = dist.irecv(buf, src=peer, tag=tag).wait(timedelta(seconds=self.timeout))
        except RuntimeError:
            ok = False
        if not ok:
            self._abandoned.append(buf)
        return TransferStatus.DONE if ok else TransferStatus.TIMEOUT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class _Boot:
    """What every worker needs to join the group and build its engine."""

    port: int
    world: int
    num_prefill: int
    timeout: float
    backend: str
    model: object
    llm_kwargs: dict

    def start(self, rank: int) -> LLM:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.port))
        torch.set_num_threads(1)
        model = self.model
        if self.backend == "nccl":  # one GPU per rank
            torch.cuda.set_device(rank % torch.cuda.device_count())
            model = model.to(f"cuda:{torch.cuda.current_device()}")
        dist.init_process_group(self.backend, rank=rank, world_size=self.world,
                                timeout=timedelta(seconds=self.timeout))
        return LLM(model, **self.llm_kwargs)


def _pool_empty(llm: LLM) -> bool:
    """At a worker's exit: after its prefix cache lets go of what it holds, is every slot and page free?"""
    llm.prefix_cache.flush()
    return llm.pool.is_empty()


def _fault(rank: int) -> str:
    """Fault injection for tests: ``KDA_PD_FAULT`` applies to prefill rank 0."""
    return os.environ.get("KDA_PD_FAULT", "") if rank == 0 else ""


DAMAGE = ("corrupt", "truncate", "drop", "wrong_boundary")


def _damage(fault: str, staging: torch.Tensor, spans: list, extra: dict):
    """A last send as a faulty sender or wire would deliver it (tests): a flipped bit, half the bytes,
    the last region missing from the spans and the bytes, or a manifest claiming another boundary."""
    if fault == "corrupt":
        staging = staging.clone()
        staging[staging.numel() // 2] ^= 0x40
    elif fault == "truncate":
        staging = staging[: staging.numel() // 2].clone()  # announced whole; gloo delivers the short message
    elif fault == "drop":
        a, _, n = spans[-1]
        staging, spans = torch.cat([staging[:a], staging[a + n:]]), spans[:-1]
    else:
        extra = {**extra, "manifest": dataclasses.replace(extra["manifest"], boundary=extra["manifest"].boundary - 1)}
    return staging, spans, extra


@dataclass
class _Out:
    ours: int
    dst: int  # the decode rank
    ids: list[int]
    params: SamplingParams
    out: Outbound


def _prefill_main(rank: int, boot: _Boot, requests, controls, results) -> None:
    """A prefill worker: each request's prompt and first token, its KV streamed per chunk, the last
    send (states, conv windows, rows left, manifest) once the prompt is done."""
    fault = _fault(rank)
    try:
        llm = boot.start(rank)
        te = DistTransferEngine(boot.timeout)
        tags = itertools.count(1)
        finished = []  # (record, last pieces, manifest), captured while the request still holds its slot and pages
        flows: dict[int, _Out] = {}  # the engine's request id -> the handoff's record

        def on_finish(req) -> None:
            if req.output_token_ids:
                f = flows.pop(req.req_id)
                finished.append((f, *f.out.final(llm.pool, req)))

        llm.scheduler.on_finish = on_finish

        def ship(kind: str, f: _Out, pieces, extra: dict) -> None:
            nonlocal fault
            staging, spans = pack(pieces)
            tag = next(tags)
            if kind == "final" and fault in DAMAGE:  # the first last send goes out damaged, then none
                staging, spans, extra = _damage(fault, staging, spans, extra)
                fault = ""
            controls[f.dst - boot.num_prefill].put((kind, f.ours, rank, tag, spans, f.ids, f.params, extra))
            if kind == "final" and fault == "die_mid_transfer":
                os._exit(3)  # the manifest is out, the bytes never follow
            if kind == "final" and fault == "hang_mid_transfer":
                time.sleep(3600)  # alive, silent, never sending
            te.register(f"t{tag}", staging)
            te.send(f"t{tag}", f.dst, tag)
            te.unregister(f"t{tag}")

        results.put(("ready", rank, None))
        stop, beat = False, time.monotonic()
        while not stop or llm.has_unfinished():
            try:
                while True:
                    item = requests.get(timeout=0.01 if llm.has_unfinished() else 0.2)
                    if item is None:
                        stop = True
                        break
                    ours, ids, params, dst = item
                    flows[llm.add_request(ids, prefill_params(params))] = _Out(ours, dst, ids, params, Outbound(len(ids)))
            except queue.Empty:
                pass
            if llm.has_unfinished():
                if fault == "hang_in_prefill":
                    time.sleep(3600)  # alive, silent, nothing announced
                llm.step()
                for pid, f in flows.items():
                    req = llm._requests[pid]
                    if req.finish_reason is None:
                        pieces = f.out.chunk(llm.pool, req)
                        if pieces:
                            ship("chunk", f, pieces, {})
            for f, pieces, man in finished:
                man.req_id = f.ours
                ship("final", f, pieces, {"manifest": man, "early": (f.out.early_sends, f.out.early_bytes)})
                results.put(("handed", rank, f.ours))
            finished.clear()
            if time.monotonic() - beat > HEARTBEAT_S:
                results.put(("alive", rank, None))
                beat = time.monotonic()
        results.put(("bye", rank, _pool_empty(llm)))
    except Exception as err:  # noqa: BLE001 -- reported to the parent
        results.put(("error", rank, f"prefill worker {rank}: {type(err).__name__}: {err}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@dataclass
class _In:
    recv: torch.Tensor
    secs: float = 0.0


def _decode_main(rank: int, boot: _Boot, control, results) -> None:
    """A decode worker: receive each announced send into the request's buffer; at the last one check
    and install the handoff, or prefill the prompt itself; decode; report."""
    try:
        llm = boot.start(rank)
        dev = llm.pool.tensors.kv.device
        te = DistTransferEngine(boot.timeout)
        inbound: dict[int, _In] = {}
        taken: set[int] = set()  # requests queued on this engine (installed, recomputed or routed here)
        dead: set[int] = set()  # prefill ranks whose bytes are no longer awaited
        theirs: dict[int, int] = {}  # engine request id -> the caller's id

        def queue_here(ours: int, ids, params, why: str | None) -> None:
            """Prefill ``ours`` on this engine (``why``: the handoff it replaces failed; None: routed here)."""
            inbound.pop(ours, None)
            if ours in taken:
                return
            taken.add(ours)
            theirs[llm.add_request(ids, params)] = ours
            if why is not None:
                results.put(("installed", rank, (ours, False, {"error": why})))

        def on_send(kind, ours, src, tag, spans, ids, params, extra) -> None:
            if ours in taken:
                return  # already prefilled here: that sender was declared dead and stopped
            if src in dead:
                queue_here(ours, ids, params, f"prefill rank {src} is gone")
                return
            f = inbound.get(ours)
            if f is None:
                f = inbound[ours] = _In(torch.zeros(sum(n for *_, n in layout(llm.pool, len(ids))), dtype=torch.uint8,
                                                    device=dev))
            buf = torch.zeros(sum(n for *_, n in spans), dtype=torch.uint8, device=dev)
            te.register(f"t{src}.{tag}", buf)
            t0 = time.perf_counter()
            status = te.receive(f"t{src}.{tag}", src, tag)
            f.secs += time.perf_counter() - t0
            te.unregister(f"t{src}.{tag}")
            if status is not TransferStatus.DONE:
                dead.add(src)
                queue_here(ours, ids, params, f"transfer from prefill rank {src}: status {status.name}")
                results.put(("prefill_timeout", rank, src))
                return
            for a, b, n in spans:
                f.recv[b:b + n] = buf[a:a + n]
            if kind == "final":
                inbound.pop(ours)
                man = extra["manifest"]
                did, ok, err = install_or_recompute(llm, ids, params, man, f.recv, TransferStatus.DONE)
                taken.add(ours)
                theirs[did] = ours
                results.put(("installed", rank, (ours, ok, handoff_info(man, f.secs, *extra["early"], err))))

        results.put(("ready", rank, None))
        stop, beat = False, time.monotonic()
        while not stop or llm.has_unfinished():
            try:
                while True:
                    msg = control.get(timeout=0.01 if llm.has_unfinished() else 0.2)
                    if msg is None:
                        stop = True
                        break
                    if msg[0] == "request":  # routed here, or its prefill worker is gone
                        queue_here(*msg[1:])
                    elif msg[0] == "dead":  # its unfinished handoffs come back as "request"s
                        dead.update(msg[1])
                    else:
                        on_send(*msg)
            except queue.Empty:
                pass
            if llm.has_unfinished():
                for out in llm.step():
                    out.req_id = theirs.pop(out.req_id)
                    results.put(("output", rank, out))
            if time.monotonic() - beat > HEARTBEAT_S:
                results.put(("alive", rank, None))
                beat = time.monotonic()
        results.put(("bye", rank, _pool_empty(llm)))
    except Exception as err:  # noqa: BLE001
        results.put(("error", rank, f"decode worker {rank}: {type(err).__name__}: {err}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@dataclass
class _Route:
    ids: list[int]
    params: SamplingParams
    prefill: int | None
    decode: int
    handed: bool = False


@dataclass
class DistCluster:
    """The parent's side: worker processes, their queues, and what each request is waiting for."""

    model: object
    llm_kwargs: dict
    num_prefill: int
    num_decode: int
    timeout: float
    routes: dict[int, _Route] = field(default_factory=dict)

    def __post_init__(self):
        model = self.model
        backend = "nccl" if model.lm_head.weight.device.type == "cuda" else "gloo"
        if backend == "nccl":
            model = copy.deepcopy(model).cpu()  # each worker moves it to its own GPU
        P, D = self.num_prefill, self.num_decode
        boot = _Boot(_free_port(), P + D, P, self.timeout, backend, model, self.llm_kwargs)
        ctx = mp.get_context("spawn")
        self.requests = [ctx.Queue() for _ in range(P)]
        self.controls = [ctx.Queue() for _ in range(D)]
        self.results = ctx.Queue()
        self.procs = [ctx.Process(target=_prefill_main, args=(i, boot, self.requests[i], self.controls, self.results),
                                  daemon=True) for i in range(P)]
        self.procs += [ctx.Process(target=_decode_main, args=(P + j, boot, self.controls[j], self.results), daemon=True)
                       for j in range(D)]
        self.dead: set[int] = set()
        self.pools_empty: dict[int, bool] = {}  # rank -> its pool was empty at exit (reported at shutdown)
        self.last_seen = [time.monotonic()] * (P + D)
        self._closed = False
        for p in self.procs:
            p.start()
        ready, deadline = set(), time.monotonic() + self.timeout + 120.0
        try:
            while len(ready) < P + D:
                try:
                    kind, rank, payload = self.results.get(timeout=0.5)
                except queue.Empty:
                    kind = None
                if kind == "ready":
                    ready.add(rank)
                elif kind == "error":
                    raise DisaggregationError(payload)
                gone = [r for r, p in enumerate(self.procs) if p.exitcode is not None]
                if gone or time.monotonic() > deadline:
                    raise DisaggregationError(f"workers did not start: ranks {sorted(set(range(P + D)) - ready)}")
        except BaseException:
            self.shutdown()
            raise
        self.last_seen = [time.monotonic()] * (P + D)

    # ---- routing -------------------------------------------------------------------------------------
    def submit(self, ours: int, ids: list[int], params: SamplingParams, i: int | None, j: int) -> None:
        self.routes[ours] = _Route(ids, params, i, j)
        if i is None:
            self.controls[j].put(("request", ours, ids, params, None))
        else:
            self.requests[i].put((ours, ids, params, self.num_prefill + j))

    def has_unfinished(self) -> bool:
        return bool(self.routes)

    # ---- failures ------------------------------------------------------------------------------------
    def _prefill_gone(self, owner, i: int, why: str) -> None:
        """Stop prefill worker ``i``; every decode worker stops waiting for it; the requests it still
        held are prefilled by their decode workers."""
        if i in self.dead:
            return
        self.dead.add(i)
        owner.router.alive[i] = False
        owner.last_error = why
        owner.counters["prefill_failed"] = True
        _stop(self.procs[i])
        for c in self.controls:
            c.put(("dead", [i]))
        for ours, r in self.routes.items():
            if r.prefill == i and not r.handed:
                owner.router.handed_off(i)
                r.handed = True
                self.controls[r.decode].put(("request", ours, r.ids, r.params, why))

    def _watch(self, owner) -> None:
        now, P = time.monotonic(), self.num_prefill
        for i in range(P):
            if i in self.dead:
                continue
            if self.procs[i].exitcode is not None:
                self._prefill_gone(owner, i, f"prefill worker {i} exited ({self.procs[i].exitcode})")
            elif owner.router.prefill_load[i] > 0 and now - self.last_seen[i] > silence_limit(self.timeout):
                self._prefill_gone(owner, i, f"prefill worker {i} silent for {now - self.last_seen[i]:.0f} s")
        for j in range(self.num_decode):
            proc = self.procs[P + j]
            if proc.exitcode is not None:
                self._fail(f"decode worker {P + j} exited ({proc.exitcode})")
            if owner.router.decode_load[j] > 0 and now - self.last_seen[P + j] > silence_limit(self.timeout):
                self._fail(f"decode worker {P + j} silent for {now - self.last_seen[P + j]:.0f} s")

    def _fail(self, why: str):
        self.shutdown()
        raise DisaggregationError(why)

    # ---- the loop ------------------------------------------------------------------------------------
    def step(self, owner) -> list:
        """Messages from the workers within a short wait: outputs returned, handoffs recorded,
        failures handled."""
        if self._closed:
            raise DisaggregationError("the workers were stopped (close())")
        done, msgs = [], []
        try:
            msgs.append(self.results.get(timeout=0.2))
            while True:
                msgs.append(self.results.get_nowait())
        except queue.Empty:
            pass
        for kind, rank, payload in msgs:
            self.last_seen[rank] = time.monotonic()
            if kind == "output":
                r = self.routes.pop(payload.req_id)
                owner.router.finished(r.decode, payload.prompt_token_ids + payload.token_ids)
                done.append(payload)
            elif kind == "handed":
                r = self.routes.get(payload)
                if r is not None and not r.handed:
                    r.handed = True
                    owner.router.handed_off(rank)
            elif kind == "installed":
                ours, ok, info = payload
                owner.record_handoff(ours, ok, info)
                r = self.routes.get(ours)
                if ok and r is not None:
                    owner.router.hold(r.decode, r.ids)
            elif kind == "prefill_timeout":
                self._prefill_gone(owner, payload, f"prefill worker {payload}: a transfer timed out")
            elif kind == "error":
                if rank < self.num_prefill:
                    self._prefill_gone(owner, rank, payload)
                else:
                    self._fail(payload)
        self._watch(owner)
        return done

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        for q in (*self.requests, *self.controls):
            q.put(None)
        end = time.monotonic() + 10.0
        live = {r for r, p in enumerate(self.procs) if p.is_alive()}
        while live - set(self.pools_empty) and time.monotonic() < end:  # each live worker's last word
            try:
                kind, rank, payload = self.results.get(timeout=0.2)
            except queue.Empty:
                live = {r for r in live if self.procs[r].is_alive()}
                continue
            if kind == "bye":
                self.pools_empty[rank] = payload
        for p in self.procs:
            p.join(timeout=max(0.1, end - time.monotonic()))
        for p in self.procs:
            _stop(p)
        for q in (*self.requests, *self.controls, self.results):
            q.close()
            q.cancel_join_thread()


def _stop(proc) -> None:
    if proc.is_alive():
        proc.terminate()
        proc.join(timeout=5.0)
    if proc.is_alive():
        proc.kill()
        proc.join()
