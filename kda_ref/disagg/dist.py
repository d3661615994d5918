"""Disaggregation across processes: :class:`PrefillWorker` and :class:`DecodeWorker`, each an engine
in its own process, the handoff's bytes moved by ``torch.distributed`` point-to-point (gloo on CPUs,
nccl when the model is on CUDA).

``DisaggregatedLLM(model, transfer="dist", num_prefill=P, num_decode=D)`` builds
:class:`DistDisaggregation`: ranks ``0..P-1`` prefill, ``P..P+D-1`` decode; the parent builds no engine,
it checks (:func:`~kda_ref.disagg.checks.request_checker`) and routes (:class:`~kda_ref.disagg.router.Router`).
The bytes move through :class:`DistTransferEngine`; a decode worker polls its receives while it decodes,
as SGLang's decode side polls its ``DecodeTransferQueue``. Every failure is bounded by ``timeout``;
every process is stopped by :meth:`DistCluster.shutdown` (and by a finalizer when the owner is collected).
Design notes: ``docs/disaggregation.md#across-processes``.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import queue
import threading
import time
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing  # noqa: F401 -- registers the tensor reductions its queues use

from ..engine import EngineConfig, LLM, RequestError, RequestOutput, SamplingParams
from ..model import HybridModel
from ..utils.procs import (Inbox, exit_with_parent, free_port, kill_process, quiet_forkserver, sendable_tokenizer,
                           stop_process, terminal_signals_held, worker_context, worker_process)
from .handoff import layout
from .install import checked, handoff_info, install_or_recompute
from .base import DisaggregatedLLM, DisaggregationError, first_token_reason, prefill_params
from .checks import request_checker
from .stream import Outbound, pack
from .transfer import Region, TransferEngine, TransferStatus

HEARTBEAT_S = 0.5
DAMAGE = ("corrupt", "truncate", "drop", "wrong_boundary")  # test faults of a last send (KDA_PD_FAULT)


def silence_limit(timeout: float) -> float:
    """Seconds a worker with work may stay silent before it is taken for dead: a prefill worker can
    legitimately wait one receive timeout of its decode worker on a send."""
    return max(2 * timeout, timeout + 5.0)


class DistTransferEngine(TransferEngine):
    """Registered buffers and byte ranges over ``torch.distributed`` point-to-point. The sender gathers
    a batch of ranges into one message under a tag; the receiver posts a receive for that tag into a
    registered buffer and polls :meth:`status` (``PENDING`` until the bytes landed, ``TIMEOUT`` after
    ``timeout`` seconds, ``FAILED`` when the peer is gone). A receive that timed out stays posted (neither gloo nor nccl can cancel one),
    so its buffer is kept alive here and no later transfer uses its tag."""

    def __init__(self, timeout: float):
        super().__init__()
        self.timeout = timeout
        self._works: dict[int, tuple[dict, torch.Tensor]] = {}  # batch id -> (what its waiter found, buffer)
        self._abandoned: list[torch.Tensor] = []

    def register(self, name: str, buf: torch.Tensor) -> None:
        self.buffers[name] = buf.view(-1).view(torch.uint8)

    def unregister(self, name: str) -> None:
        self.buffers.pop(name, None)

    def batch_write(self, peer: str | int, regions: list[Region], tag: int = 0) -> int:
        """Send the regions' source bytes, in order, as one message to rank ``peer`` under ``tag``, into
        the receive the peer posted for that tag (the serving engine announced the ranges to it; each
        region's ``dst`` names that receive's buffer). Completes when sent."""
        bid = next(self._ids)
        try:
            parts = [self.buffers[r.src][r.src_offset:r.src_offset + r.length] for r in regions]
            msg = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.uint8)
            dist.send(msg, dst=peer, tag=tag)
        except (KeyError, RuntimeError):
            self._status[bid] = TransferStatus.FAILED
            return bid
        self._status[bid] = TransferStatus.DONE
        return bid

    def post_receive(self, name: str, peer: int, tag: int) -> int:
        """Start receiving the message rank ``peer`` sends under ``tag`` into the registered ``name``. A
        gloo receive only progresses inside ``wait``, so a helper thread waits on it (at most
        ``timeout`` seconds) and :meth:`status` reads what it found."""
        bid = next(self._ids)
        buf = self.buffers[name]
        box = {"done": False, "ok": False, "t0": time.monotonic()}
        try:
            work = dist.irecv(buf, src=peer, tag=tag)
        except RuntimeError:
            self._status[bid] = TransferStatus.FAILED
            return bid

        def wait() -> None:
            try:
                box["ok"] = work.wait(timedelta(seconds=self.timeout)) is not False
            except RuntimeError:  # timed out, or the peer is gone
                box["ok"] = False
            box["done"] = True

        threading.Thread(target=wait, daemon=True, name=f"recv-{peer}-{tag}").start()
        self._works[bid] = (box, buf)
        self._status[bid] = TransferStatus.PENDING
        return bid

    def status(self, batch_id: int) -> TransferStatus:
        st = self._status.get(batch_id, TransferStatus.FAILED)
        if st is not TransferStatus.PENDING:
            return st
        box, buf = self._works[batch_id]
        if not box["done"]:
            return st
        del self._works[batch_id]
        if box["ok"]:
            st = TransferStatus.DONE
        else:
            late = time.monotonic() - box["t0"] >= self.timeout
            st = TransferStatus.TIMEOUT if late else TransferStatus.FAILED
            self._abandoned.append(buf)  # a receive that gave up may still be posted: keep its memory
        self._status[batch_id] = st
        return st


@dataclass
class _Boot:
    """What every worker needs to join the group and build its engine."""

    port: int
    world: int
    num_prefill: int
    timeout: float
    backend: str
    model: object  # a HybridModel, a ModelConfig (each worker builds the seed's weights) or a checkpoint folder
    config: EngineConfig  # every engine's settings

    def start(self, rank: int) -> LLM:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.port))
        torch.set_num_threads(1)
        model = self.model
        if self.backend == "nccl":  # one GPU per rank
            torch.cuda.set_device(rank % torch.cuda.device_count())
            if isinstance(model, HybridModel):
                model = model.to(f"cuda:{torch.cuda.current_device()}")
        # a prefill's send may wait for its decode worker to post the receive: give it longer than a
        # receive waits, so a slow decode step does not fail a healthy sender first
        pg_timeout = silence_limit(self.timeout) if rank < self.num_prefill else self.timeout
        dist.init_process_group(self.backend, rank=rank, world_size=self.world, timeout=timedelta(seconds=pg_timeout))
        return LLM(model, config=self.config)


def _tokenizer_info(llm: LLM) -> tuple:
    """``(tokenizer, why none)`` of a worker's engine, for the parent (``tokenizer="auto"``: the engine
    picked it) -- ``None`` with the reason when the tokenizer cannot be pickled to it."""
    return sendable_tokenizer(llm.tokenizer, llm.tokenizer_note, "the workers'",
                              "; pass tokenizer= to DisaggregatedLLM")


def _refused(ours: int, ids: list[int], err: RequestError) -> RequestOutput:
    """A request the worker's engine refused when it arrived (its peak memory against the budget, which the
    parent checks from the configurations and the engine again): an error output with its message."""
    return RequestOutput(ours, list(ids), [], None, "error", {"prompt_tokens": len(ids), "output_tokens": 0,
                                                             "preemptions": 0, "ttft_s": None, "latency_s": 0.0},
                         error=str(err))


def _pool_empty(llm: LLM) -> bool:
    """At a worker's exit: after its prefix cache lets go of what it holds, is every slot and page free?"""
    llm.prefix_cache.flush()
    return llm.pool.is_empty()


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


class _Worker(ABC):
    """What both workers share: the engine, the transfer engine, the results queue, the heartbeat."""

    kind = "worker"

    def __init__(self, rank: int, boot: _Boot, results):
        self.rank, self.boot, self.results = rank, boot, results
        self.llm: LLM | None = None
        self.te = DistTransferEngine(boot.timeout)
        self._beat = time.monotonic()

    def report(self, kind: str, payload=None) -> None:
        self.results.put((kind, self.rank, payload))

    def heartbeat(self) -> None:
        if time.monotonic() - self._beat > HEARTBEAT_S:
            self.report("alive")
            self._beat = time.monotonic()

    def run(self) -> None:
        exit_with_parent()  # a parent killed without its shutdown leaves no worker serving nobody
        try:
            self.llm = self.boot.start(self.rank)
            self.setup()
            self.report("ready", _tokenizer_info(self.llm) if self.rank == 0 else None)
            self.loop()
            self.report("bye", _pool_empty(self.llm))
        except Exception as err:  # noqa: BLE001 -- reported to the parent
            self.report("error", f"{self.kind} worker {self.rank}: {type(err).__name__}: {err}")
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()

    @abstractmethod
    def setup(self) -> None:
        """Hook the engine (called once it is built)."""

    @abstractmethod
    def loop(self) -> None:
        """Serve until the parent says stop and nothing is left."""


@dataclass
class _Out:
    ours: int
    dst: int  # the decode rank
    ids: list[int]
    params: SamplingParams
    out: Outbound


class PrefillWorker(_Worker):
    """A prefill instance: each request's prompt and first token, its KV streamed per chunk, the last
    send (states, conv windows, rows left, manifest) once the prompt is done."""

    kind = "prefill"

    def __init__(self, rank: int, boot: _Boot, requests, links, results):
        super().__init__(rank, boot, results)
        self.requests = requests
        self.links = links  # one queue per decode worker, written by this worker only
        self.fault = os.environ.get("KDA_PD_FAULT", "") if rank == 0 else ""  # tests: prefill rank 0 only
        self.tags = itertools.count(1)
        self.flows: dict[int, _Out] = {}  # the engine's request id -> the handoff's record
        self.finished: list = []  # (record, last pieces, manifest), captured before the slot and pages are freed

    def setup(self) -> None:
        self.llm.add_finish_listener(self._on_finish)

    def _on_finish(self, req) -> None:
        f, eos = self.flows[req.req_id], self.llm.config.eos_token_ids
        if first_token_reason(f.params, req.finish_reason, req.output_token_ids[-1], eos) is None:  # hand off
            del self.flows[req.req_id]
            self.finished.append((f, *f.out.final(self.llm.pool, req)))

    def _settle(self, outs) -> None:
        """Requests this engine finished without a handoff -- the first token ends them under the
        caller's parameters, or their prefill failed --: their outputs go straight to the parent."""
        eos = self.llm.config.eos_token_ids
        for out in outs:
            f = self.flows.pop(out.req_id, None)
            if f is None:
                continue  # handed off
            if out.finish_reason != "error":
                out.finish_reason = first_token_reason(f.params, out.finish_reason, out.token_ids[-1], eos)
            out.req_id = f.ours
            self.report("output", out)

    def _admit(self) -> bool:
        """Queue what the parent sent; False once it said stop."""
        try:
            while True:
                item = self.requests.get(timeout=0.01 if self.llm.has_unfinished() else 0.2)
                if item is None:
                    return False
                ours, ids, params, dst = item
                try:  # its peak with the caller's max_tokens, on this engine (every engine has this configuration)
                    self.llm.check_request(ids, params)
                except RequestError as err:
                    self.report("output", _refused(ours, ids, err))
                    continue
                pid = self.llm.add_request(ids, prefill_params(params))
                self.flows[pid] = _Out(ours, dst, ids, params, Outbound(len(ids)))
        except queue.Empty:
            return True

    def _ship(self, kind: str, f: _Out, pieces, extra: dict) -> None:
        staging, spans = pack(pieces)
        tag = next(self.tags)
        if kind == "final" and self.fault in DAMAGE:  # the first last send goes out damaged, then none
            staging, spans, extra = _damage(self.fault, staging, spans, extra)
            self.fault = ""
        link = self.links[f.dst - self.boot.num_prefill]
        link.put((kind, f.ours, self.rank, tag, spans, f.ids, f.params, extra))
        if kind == "final" and self.fault == "die_mid_transfer":
            link.close()
            link.join_thread()  # the announcement is whole in the pipe
            os._exit(3)  # the manifest is out, the bytes never follow
        if kind == "final" and self.fault == "hang_mid_transfer":
            time.sleep(3600)  # alive, silent, never sending
        self.te.register(f"t{tag}", staging)
        bid = self.te.batch_write(f.dst, [Region(f"t{tag}", 0, f"t{self.rank}.{tag}", 0, staging.numel())], tag=tag)
        self.te.unregister(f"t{tag}")
        status = self.te.free_batch(bid)  # the send is synchronous: its final status
        if status is not TransferStatus.DONE:  # the decode worker's receive fails too: it recomputes
            self.report("send_failed", (f.ours, f.dst))

    def loop(self) -> None:
        running = True
        while running or self.llm.has_unfinished():
            running = self._admit() and running
            if self.llm.has_unfinished():
                if self.fault == "hang_in_prefill":
                    time.sleep(3600)  # alive, silent, nothing announced
                self._settle(self.llm.step())
                for pid, f in self.flows.items():
                    req = self.llm.request(pid)
                    pieces = f.out.chunk(self.llm.pool, req) if req.finish_reason is None else []
                    if pieces:
                        self._ship("chunk", f, pieces, {})
            for f, pieces, man in self.finished:
                man.req_id = f.ours
                self._ship("final", f, pieces, {"manifest": man, "early": (f.out.early_sends, f.out.early_bytes)})
                self.report("handed", f.ours)
            self.finished.clear()
            self.heartbeat()


@dataclass
class _In:
    ids: list[int]
    params: SamplingParams
    recv: torch.Tensor  # the request's receive buffer (the handoff's layout)
    pending: int = 0  # receives posted, not landed
    final: dict | None = None  # the last send's extra (manifest) once it landed
    regions: object = None  # once every byte landed: the checked regions, or the HandoffError
    secs: float = 0.0  # each receive's time from posted to landed, summed


class DecodeWorker(_Worker):
    """A decode instance: a receive posted for each announced send, decoding on while they are pending;
    at a request's last send, check and install its handoff or prefill the prompt itself."""

    kind = "decode"

    def __init__(self, rank: int, boot: _Boot, control, links, results):
        super().__init__(rank, boot, results)
        self.control = control  # from the parent
        self.links = links  # one queue per prefill worker (its announcements), read until that worker is dead
        self.inbound: dict[int, _In] = {}
        self.to_install: list[int] = []  # requests whose bytes all landed, waiting for room on this engine
        self.receives: dict[int, tuple] = {}  # batch id -> (request, src, spans, buffer name, kind, extra)
        self.taken: set[int] = set()  # requests queued on this engine (installed, recomputed or routed here)
        self.dead: set[int] = set()  # prefill ranks whose bytes are no longer awaited
        self.theirs: dict[int, int] = {}  # engine request id -> the caller's id

    def _queue_here(self, ours: int, ids, params, why: str | None) -> None:
        """Prefill ``ours`` on this engine (``why``: the handoff it replaces failed; None: routed here).
        A handoff whose bytes all landed already stays queued for install instead."""
        f = self.inbound.get(ours)
        if f is not None and f.regions is not None:
            return
        self.inbound.pop(ours, None)
        if ours in self.taken:
            return
        self.taken.add(ours)
        try:  # routed here, its peak was not checked yet
            self.theirs[self.llm.add_request(ids, params)] = ours
        except RequestError as err:
            self.report("output", _refused(ours, ids, err))
            return
        if why is not None:
            self.report("installed", (ours, False, {"error": why}))

    def _announced(self, kind, ours, src, tag, spans, ids, params, extra) -> None:
        if src in self.dead:  # its bytes are not awaited
            self._queue_here(ours, ids, params, f"prefill rank {src} is gone")
            return
        name = f"t{src}.{tag}"
        self.te.register(name, torch.zeros(sum(n for *_, n in spans), dtype=torch.uint8,
                                           device=self.llm.pool.tensors.kv.device))
        if ours in self.taken:  # finished elsewhere meanwhile: receive and drop, so every send stays matched
            self.receives[self.te.post_receive(name, src, tag)] = (ours, src, spans, name, "drop", extra,
                                                                   time.perf_counter())
            return
        f = self.inbound.get(ours)
        if f is None:
            size = sum(n for *_, n in layout(self.llm.pool, len(ids)))
            f = self.inbound[ours] = _In(ids, params, torch.zeros(size, dtype=torch.uint8,
                                                                  device=self.llm.pool.tensors.kv.device))
        self.receives[self.te.post_receive(name, src, tag)] = (ours, src, spans, name, kind, extra, time.perf_counter())
        f.pending += 1

    def _poll(self) -> None:
        """Land every receive that completed; a failed or timed-out one hands its request to this engine."""
        for bid, (ours, src, spans, name, kind, extra, posted) in list(self.receives.items()):
            status = self.te.status(bid)
            if status is TransferStatus.PENDING:
                continue
            self.te.free_batch(bid)
            del self.receives[bid]
            buf = self.te.buffers[name]
            self.te.unregister(name)
            f = self.inbound.get(ours) if kind != "drop" else None
            if f is None and status is TransferStatus.DONE:
                continue  # the request was handed to this engine meanwhile: the bytes are dropped
            if status is not TransferStatus.DONE:  # its sender is gone or stuck
                self.dead.add(src)
                if f is not None:  # (None: a dropped send that never came)
                    self._queue_here(ours, f.ids, f.params, f"transfer from prefill rank {src}: status {status.name}")
                self.report("prefill_timeout", src)
                continue
            for a, b, n in spans:
                f.recv[b:b + n] = buf[a:a + n]
            f.secs += time.perf_counter() - posted
            f.pending -= 1
            if kind == "final":
                f.final = extra
            if f.final is not None and f.pending == 0:  # every byte landed: check once
                f.regions = checked(f.recv, f.final["manifest"], self.llm.pool, f.ids, TransferStatus.DONE)
                f.recv = None
                self.to_install.append(ours)
        self._install_waiting()

    def _install_waiting(self) -> None:
        """Install (or refuse and prefill) every complete handoff this engine has room for."""
        still = []
        for ours in self.to_install:
            f = self.inbound.get(ours)
            if f is None:
                continue  # handed to this engine to prefill meanwhile
            man = f.final["manifest"]
            res = install_or_recompute(self.llm, f.ids, f.params, man, f.regions)
            if res is None:
                still.append(ours)  # sound, but no room until a step frees some
                continue
            del self.inbound[ours]
            self.taken.add(ours)
            self.theirs[res.rid] = ours
            info = handoff_info(man, f.secs, *f.final["early"], res.error)
            self.report("installed", (ours, res.ok, {**info, "kept_state": res.kept_state}))
        self.to_install = still

    def setup(self) -> None:
        self.inbox = Inbox({"parent": self.control, **{i: q for i, q in enumerate(self.links)}})

    def _read_control(self) -> bool:
        """Act on what the parent and the prefill workers sent; False once the parent said stop."""
        running = True
        busy = self.llm.has_unfinished() or self.receives
        for _, msg in self.inbox.drain(wait=0.002 if busy else 0.02):
            if msg is None:
                running = False
            elif msg[0] == "request":  # routed here, or its prefill worker is gone
                self._queue_here(*msg[1:])
            elif msg[0] == "dead":  # its bytes are not awaited; its unfinished handoffs come back as "request"s
                self.dead.update(msg[1])
            elif msg[0] == "forget":  # finished on the prefill side (a first token that ends it, an error)
                self.inbound.pop(msg[1], None)
                self.taken.add(msg[1])
            else:
                self._announced(*msg)
        return running

    def loop(self) -> None:
        running = True
        while running or self.llm.has_unfinished():
            running = self._read_control() and running
            self._poll()
            if self.llm.has_unfinished():
                for out in self.llm.step():
                    out.req_id = self.theirs.pop(out.req_id)
                    self.report("output", out)
                self._install_waiting()
            self.heartbeat()


def _prefill_main(rank: int, boot: _Boot, requests, links, results) -> None:
    PrefillWorker(rank, boot, requests, links, results).run()


def _decode_main(rank: int, boot: _Boot, control, links, results) -> None:
    DecodeWorker(rank, boot, control, links, results).run()


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
    config: EngineConfig
    num_prefill: int
    num_decode: int
    timeout: float
    routes: dict[int, _Route] = field(default_factory=dict)

    def __post_init__(self):
        model = self.model  # a checkpoint folder is loaded, a model configuration built, by each worker (on the CPU)
        on_cuda = isinstance(model, HybridModel) and model.lm_head.weight.device.type == "cuda"
        backend = "nccl" if on_cuda else "gloo"
        if backend == "nccl":
            model = copy.deepcopy(model).cpu()  # each worker moves it to its own GPU
        P, D = self.num_prefill, self.num_decode
        boot = _Boot(free_port(), P + D, P, self.timeout, backend, model, self.config)
        if backend == "nccl" and P + D > torch.cuda.device_count():
            raise ValueError(f"num_prefill / num_decode: nccl runs one worker per GPU; {P + D} workers, "
                             f"{torch.cuda.device_count()} GPUs")
        ctx = worker_context(backend)
        quiet_forkserver(ctx)  # a terminal's Ctrl-C reaches only this process, whose shutdown stops the workers
        # one writer per queue: a worker killed mid-write can only damage queues nobody reads any more
        self.requests = [ctx.Queue() for _ in range(P)]  # parent -> prefill i
        self.controls = [ctx.Queue() for _ in range(D)]  # parent -> decode j
        self.links = [[ctx.Queue() for _ in range(D)] for _ in range(P)]  # prefill i -> decode j
        self.results = [ctx.Queue() for _ in range(P + D)]  # worker r -> parent
        self.procs = [worker_process(ctx, _prefill_main, (i, boot, self.requests[i], self.links[i], self.results[i]),
                                     daemon=True) for i in range(P)]
        self.procs += [worker_process(ctx, _decode_main, (P + j, boot, self.controls[j],
                                                          [self.links[i][j] for i in range(P)], self.results[P + j]),
                                      daemon=True) for j in range(D)]
        self.inbox = Inbox(dict(enumerate(self.results)))
        self.dead: set[int] = set()
        self.pools_empty: dict[int, bool] = {}  # rank -> its pool was empty at exit (reported at shutdown)
        self.tokenizer_info: tuple = (None, "the workers did not start")  # rank 0's engine's, once ready
        self._closed = False
        ready, deadline = set(), time.monotonic() + self.timeout + 120.0
        try:
            with terminal_signals_held():  # a Ctrl-C lands after the starts, every worker known to the shutdown
                for p in self.procs:  # inside: a start that fails stops the ones already started
                    p.start()
            while len(ready) < P + D:
                for kind, rank, payload in self._drain(wait=0.5):
                    if kind == "ready":
                        ready.add(rank)
                        if rank == 0:
                            self.tokenizer_info = payload  # (the engines' tokenizer, why none)
                    elif kind == "error":
                        raise DisaggregationError(payload)
                gone = [r for r, p in enumerate(self.procs) if p.exitcode is not None]
                if gone or time.monotonic() > deadline:
                    raise DisaggregationError(f"workers did not start: ranks {sorted(set(range(P + D)) - ready)}")
        except BaseException:
            self.shutdown(say_bye=False)  # workers still starting have no pool to report: stop them now
            raise
        self.last_seen = [time.monotonic()] * (P + D)  # rank -> its last message (the watchdog's clock)

    def _drain(self, wait: float) -> list:
        """Every message the workers sent, waiting up to ``wait`` seconds for the first (each results
        queue has its own reader thread: a message cut short by a killed worker blocks only that one)."""
        return [msg for _, msg in self.inbox.drain(wait)]

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
        kill_process(self.procs[i])
        for c in self.controls:
            c.put(("dead", [i]))
        # every request of that worker without an output: its decode worker prefills it, unless it
        # installed (or already prefilled) it -- announcements still queued from the dead worker are not read
        for ours, r in self.routes.items():
            if r.prefill == i:
                self._mark_handed(owner, r)
                self.controls[r.decode].put(("request", ours, r.ids, r.params, why))

    @staticmethod
    def _mark_handed(owner, r) -> None:
        """The route's prefill worker is done with it (handed off, finished or gone): its load drops, once."""
        if not r.handed:
            r.handed = True
            owner.router.handed_off(r.prefill)

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
                self._fail(P + j, f"decode worker {P + j} exited ({proc.exitcode})")
            if owner.router.decode_load[j] > 0 and now - self.last_seen[P + j] > silence_limit(self.timeout):
                self._fail(P + j, f"decode worker {P + j} silent for {now - self.last_seen[P + j]:.0f} s")

    def _fail(self, rank: int, why: str):
        """A decode worker failed: it is killed at once (a hung one would not answer a polite stop), the others
        are stopped, and the caller gets :class:`~kda_ref.disagg.base.DisaggregationError`."""
        self.dead.add(rank)
        kill_process(self.procs[rank])
        self.shutdown()
        raise DisaggregationError(why)

    # ---- the loop ------------------------------------------------------------------------------------
    def step(self, owner) -> list:
        """Messages from the workers within a short wait: outputs returned, handoffs recorded,
        failures handled."""
        if self._closed:
            raise DisaggregationError("the workers were stopped (close())")
        done = []
        for kind, rank, payload in self._drain(wait=0.2):
            self.last_seen[rank] = time.monotonic()
            if kind == "output":
                r = self.routes.pop(payload.req_id, None)
                if r is None:
                    continue
                if r.prefill is not None:  # its "handed" may still be on its way
                    self._mark_handed(owner, r)
                if rank < self.num_prefill:  # finished on the prefill side: nothing crosses
                    self.controls[r.decode].put(("forget", payload.req_id))
                    owner.router.finished(r.decode, None)
                else:
                    ok = payload.finish_reason != "error"  # a failed request donated no end state
                    owner.router.finished(r.decode, payload.prompt_token_ids + payload.token_ids if ok else None)
                done.append(payload)
            elif kind == "handed":
                r = self.routes.get(payload)
                if r is not None:
                    self._mark_handed(owner, r)
            elif kind == "installed":
                ours, ok, info = payload
                owner.record_handoff(ours, ok, info)
                r = self.routes.get(ours)
                if info.get("kept_state") and r is not None:
                    owner.router.hold(r.decode, r.ids)
            elif kind == "send_failed":
                owner.counters["sends_failed"] = owner.counters.get("sends_failed", 0) + 1
            elif kind == "prefill_timeout":
                self._prefill_gone(owner, payload, f"prefill worker {payload}: a transfer timed out")
            elif kind == "error":
                if rank < self.num_prefill:
                    self._prefill_gone(owner, rank, payload)
                else:
                    self._fail(rank, payload)
        self._watch(owner)
        return done

    def shutdown(self, say_bye: bool = True) -> None:
        """Stop every worker: each live one gets up to 10 s (``say_bye``; else none) to finish and report whether
        its pool ended empty, then whatever still runs is terminated; the queues are closed."""
        if self._closed:
            return
        self._closed = True
        for q in (*self.requests, *self.controls):
            q.put(None)
        end = time.monotonic() + (10.0 if say_bye else 0.0)
        live = {r for r, p in enumerate(self.procs) if p.is_alive() and r not in self.dead}
        while live - set(self.pools_empty) and time.monotonic() < end:  # each live worker's last word
            for kind, rank, payload in self._drain(wait=0.2):
                if kind == "bye":
                    self.pools_empty[rank] = payload
            live = {r for r in live if self.procs[r].is_alive() or r in self.pools_empty}
        for p in self.procs:
            stop_process(p, grace=max(0.1, end - time.monotonic()))
        self.inbox.close()
        for q in (*self.requests, *self.controls, *[q for row in self.links for q in row], *self.results):
            q.close()
            q.cancel_join_thread()


class DistDisaggregation(DisaggregatedLLM):
    """Every prefill and decode engine a worker process (:class:`DistCluster`, started at the first
    request or by :meth:`start`); this object checks, routes and records, and builds no engine. The
    arguments are :class:`~kda_ref.disagg.base.DisaggregatedLLM`'s; ``tracer`` is refused (the engines
    run elsewhere). Requests are checked here, as the engines check them (:func:`~kda_ref.disagg.checks.
    request_checker`: the peak memory against the budget too). With ``tokenizer="auto"`` the engines pick
    the tokenizer and rank 0 reports it: the first text prompt starts the workers."""

    transfer = "dist"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.tracer is not None:
            raise ValueError("tracer: the worker processes' engines run elsewhere; trace transfer='local'")
        self.checker = request_checker(self.model, self.engine_config, self.tokenizer)
        if self.model is None:
            self.model = self.checker.config  # what LLM builds for None, built by each worker
        self._cluster: DistCluster | None = None

    def _checked(self, prompt, params):
        if isinstance(prompt, str) and prompt and not self.checker.tokenizer_known:
            self._cluster_up()  # tokenizer="auto": the engines pick it (a folder's own, bytes for a byte vocabulary)
        return super()._checked(prompt, params)

    def _cluster_up(self) -> DistCluster:
        if self._cluster is None:
            self._cluster = DistCluster(self.model, self.engine_config, self.num_prefill, self.num_decode,
                                        self.timeout)
            weakref.finalize(self, self._cluster.shutdown)  # the workers stop when this object goes
            if not self.checker.tokenizer_known:  # rank 0 reported its engine's
                self.checker.use_tokenizer(*self._cluster.tokenizer_info)
        return self._cluster

    def _submit(self, ours, prompt, ids, sp, i, j) -> None:
        self._cluster_up().submit(ours, ids, sp, i, j)

    def has_unfinished(self) -> bool:
        return self._cluster is not None and self._cluster.has_unfinished()

    def step(self) -> list:
        """What the workers report within a short wait: the requests that finished."""
        if self._cluster is None:
            return []
        try:
            return self._cluster.step(self)
        except DisaggregationError:
            self._cluster, self.router = None, self.new_router()  # stopped; the next request starts fresh workers
            raise

    def start(self) -> None:
        """Start the worker processes now rather than at the first request."""
        self._cluster_up()

    def close(self) -> None:
        """Stop the worker processes. Each worker that was still alive reports whether its pool was empty
        once its prefix cache let go (:attr:`worker_pools_empty`, rank -> bool)."""
        if self._cluster is not None:
            self._cluster.shutdown()
            self.worker_pools_empty = dict(self._cluster.pools_empty)
            self._cluster, self.router = None, self.new_router()
