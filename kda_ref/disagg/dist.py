"""Disaggregation across processes: a prefill worker and a decode worker, each an engine in its own
process, the handoff's bytes moved by ``torch.distributed`` point-to-point (gloo on CPUs).

``DisaggregatedLLM(model, transfer="dist")`` runs this. The parent only routes: requests go to the
prefill worker; each finished prefill's manifest goes over a control queue to the decode worker, and
the regions follow as one ``send`` of the staging buffer into a buffer the decode worker registered
(:class:`DistTransferEngine`); finished requests come back to the parent. Every receive waits at most
``timeout`` seconds: a prefill worker that dies mid-transfer makes the receive fail, the decode worker
prefills that request itself, and the parent hands every request not yet announced to the decode
worker to prefill as well. Workers are terminated when the parent is done or gives up.
"""

from __future__ import annotations

import os
import queue
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..engine import LLM, RequestOutput, SamplingParams
from .handoff import capture
from .transfer import TransferStatus

PREFILL, DECODE = 0, 1


class DistTransferEngine:
    """Registered buffers and byte ranges over ``torch.distributed`` point-to-point."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.buffers: dict[str, torch.Tensor] = {}
        self.bytes_sent = 0

    def register(self, name: str, buf: torch.Tensor) -> None:
        self.buffers[name] = buf.view(-1).view(torch.uint8)

    def unregister(self, name: str) -> None:
        self.buffers.pop(name, None)

    def send(self, name: str, peer: int) -> TransferStatus:
        buf = self.buffers[name]
        try:
            dist.send(buf, dst=peer)
        except RuntimeError:
            return TransferStatus.FAILED
        self.bytes_sent += buf.numel()
        return TransferStatus.DONE

    def receive(self, name: str, peer: int) -> TransferStatus:
        try:
            work = dist.irecv(self.buffers[name], src=peer)
            ok = work.wait(timedelta(seconds=self.timeout))
        except RuntimeError:
            return TransferStatus.TIMEOUT
        return TransferStatus.DONE if ok else TransferStatus.TIMEOUT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank: int, port: int, timeout: float) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timedelta(seconds=timeout))


def _prefill_main(port, timeout, model, llm_kwargs, requests, control, results) -> None:
    """Rank 0: prefill every request (its first token), then announce and send its handoff."""
    fault = os.environ.get("KDA_PD_FAULT", "")
    try:
        _init(PREFILL, port, timeout)
        llm = LLM(model, **llm_kwargs)
        te = DistTransferEngine(timeout)
        ready = []
        llm.scheduler.on_finish = lambda req: ready.append(capture(llm.pool, req, len(req.prompt_token_ids)))
        ours: dict[int, int] = {}  # prefill engine id -> the caller's id
        prompt_of: dict[int, tuple] = {}  # the caller's id -> (prompt, params)
        stop = False
        while not stop or llm.has_unfinished():
            try:
                while True:
                    item = requests.get(timeout=0.01 if llm.has_unfinished() else 0.2)
                    if item is None:
                        stop = True
                        break
                    rid, prompt, params = item
                    prompt_of[rid] = (prompt, params)
                    ours[llm.add_request(prompt, SamplingParams(max_tokens=1, ignore_eos=True,
                                                                temperature=params.temperature, top_k=params.top_k,
                                                                seed=params.seed))] = rid
            except queue.Empty:
                pass
            if llm.has_unfinished():
                llm.step()
            for staging, man in ready:
                caller = ours.pop(man.req_id)
                man.req_id = caller
                control.put(("handoff", (man, prompt_of.pop(caller))))
                if fault == "die_mid_transfer":
                    os._exit(3)  # the manifest is out, the bytes never follow
                te.register(f"req{caller}", staging)
                te.send(f"req{caller}", DECODE)
                te.unregister(f"req{caller}")
            ready.clear()
        results.put(("prefill_done", te.bytes_sent))
    except Exception as err:  # noqa: BLE001 -- reported to the parent
        results.put(("error", f"prefill worker: {type(err).__name__}: {err}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _decode_main(port, timeout, model, llm_kwargs, control, results) -> None:
    """Rank 1: receive each announced handoff, verify and install it (or prefill it itself), decode."""
    from .llm import install_or_recompute

    try:
        _init(DECODE, port, timeout)
        llm = LLM(model, **llm_kwargs)
        te = DistTransferEngine(timeout)
        seen: set[int] = set()  # the caller's ids this worker has taken (handed off or prefilled here)
        theirs: dict[int, int] = {}  # decode engine id -> the caller's id
        stop = False
        counters = {"handoffs": 0, "recomputed": 0, "kv_bytes": 0, "state_bytes": 0, "conv_bytes": 0,
                    "transfer_s": 0.0, "bytes_per_request": {}}
        while not stop or llm.has_unfinished():
            try:
                while True:
                    msg = control.get(timeout=0.01 if llm.has_unfinished() else 0.2)
                    if msg is None:
                        stop = True
                        break
                    kind, payload = msg
                    if kind == "prefill_yourself":  # the prefill worker is gone: these never got a handoff
                        for rid, prompt, params in payload:
                            if rid not in seen:
                                seen.add(rid)
                                theirs[llm.add_request(prompt, params)] = rid
                                counters["recomputed"] += 1
                    else:  # a handoff: its manifest now, its bytes over torch.distributed
                        man, (prompt, params) = payload
                        seen.add(man.req_id)
                        recv = torch.zeros(man.total_bytes, dtype=torch.uint8)
                        te.register(f"recv{man.req_id}", recv)
                        t0 = time.perf_counter()
                        status = te.receive(f"recv{man.req_id}", PREFILL)
                        counters["transfer_s"] += time.perf_counter() - t0
                        te.unregister(f"recv{man.req_id}")
                        did, ok, _ = install_or_recompute(llm, prompt, params, man, recv, status)
                        theirs[did] = man.req_id
                        counters["handoffs" if ok else "recomputed"] += 1
                        if ok:
                            counters["bytes_per_request"][man.req_id] = man.bytes_by_kind()
                            for k, n in man.bytes_by_kind().items():
                                counters[f"{k}_bytes"] += n
            except queue.Empty:
                pass
            if llm.has_unfinished():
                for out in llm.step():
                    out.req_id = theirs.pop(out.req_id)
                    results.put(("output", out))
        results.put(("decode_done", counters))
    except Exception as err:  # noqa: BLE001
        results.put(("error", f"decode worker: {type(err).__name__}: {err}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class DisaggregationError(RuntimeError):
    """The decode worker failed or the requests did not finish within the timeout."""


def run_dist(model, llm_kwargs: dict, prompts: list, params: list[SamplingParams], timeout: float):
    """Run ``prompts`` through a prefill and a decode worker process; returns (outputs in order, counters)."""
    ctx = mp.get_context("spawn")
    requests, control, results = ctx.Queue(), ctx.Queue(), ctx.Queue()
    port = _free_port()
    pre = ctx.Process(target=_prefill_main, args=(port, timeout, model, llm_kwargs, requests, control, results),
                      daemon=True)
    dec = ctx.Process(target=_decode_main, args=(port, timeout, model, llm_kwargs, control, results), daemon=True)
    pre.start()
    dec.start()
    for rid, (p, sp) in enumerate(zip(prompts, params)):
        requests.put((rid, p, sp))
    outs: dict[int, RequestOutput] = {}
    counters: dict = {"prefill_failed": False}
    deadline = time.monotonic() + timeout + 60.0 * (1 + len(prompts))
    fallen_back = False
    try:
        while len(outs) < len(prompts):
            try:
                kind, payload = results.get(timeout=0.5)
            except queue.Empty:
                kind, payload = None, None
            if kind == "output":
                outs[payload.req_id] = payload
            elif kind == "error" and payload.startswith("decode"):
                raise DisaggregationError(payload)
            prefill_gone = (kind == "error") or (pre.exitcode not in (None, 0))
            if prefill_gone and not fallen_back:  # every request without an output: the decode side prefills it
                fallen_back = counters["prefill_failed"] = True
                control.put(("prefill_yourself", [(rid, prompts[rid], params[rid])
                                                  for rid in range(len(prompts)) if rid not in outs]))
            if dec.exitcode not in (None, 0):
                raise DisaggregationError(f"decode worker died (exit code {dec.exitcode})")
            if time.monotonic() > deadline:
                raise DisaggregationError(f"{len(prompts) - len(outs)} requests did not finish in time")
        requests.put(None)
        control.put(None)
        end = time.monotonic() + 30.0
        while time.monotonic() < end:
            try:
                kind, payload = results.get(timeout=0.5)
            except queue.Empty:
                if dec.exitcode is not None:
                    break
                continue
            if kind == "decode_done":
                counters.update(payload)
                break
    finally:
        for proc in (pre, dec):
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for q in (requests, control, results):
            q.close()
    return [outs[i] for i in range(len(prompts))], counters
