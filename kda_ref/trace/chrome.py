"""``to_chrome_trace``: a recorded trace as a Chrome trace (the Trace Event Format), for Perfetto.

The time axis is **logical**: step ``s`` occupies ``[s * step_us, (s + 1) * step_us)`` microseconds,
shared by the layers in layer order, so widths say what ran when, not how long it took. Tracks:
process 0 "engine" (steps, cache operations, pool bytes), process 1 "requests" (one thread per
request), process 2 "layers" (one thread per layer). It is the format ``torch.profiler`` exports,
which SGLang (``/start_profile``) and vLLM (0.32.0: ``--profiler-config`` with ``"profiler": "torch"`` and a
``torch_profiler_dir``) profile a server with.

Design notes: ``docs/trace.md#chrome-traces-for-perfetto``.
"""

from __future__ import annotations

from .events import (BatchComposition, CacheEvent, KernelDispatch, PoolSnapshot, Preemption, RequestAborted,
                     RequestArrived, RequestFinished, SpecVerify, TraceEvent)

STEP_US = 1000  # one engine step on the logical time axis
ENGINE_PID, REQUEST_PID, LAYER_PID = 0, 1, 2
STEP_TID, CACHE_TID = 0, 1


def _meta(pid: int, tid: int, what: str, name: str) -> dict:
    return {"name": what, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": {"name": name}}


def _span(name: str, ts: int, dur: int, pid: int, tid: int, args: dict | None = None) -> dict:
    return {"name": name, "ph": "X", "ts": ts, "dur": max(0, dur), "pid": pid, "tid": tid, "args": args or {}}


def _instant(name: str, ts: int, pid: int, tid: int, args: dict) -> dict:
    return {"name": name, "ph": "i", "s": "t", "ts": ts, "pid": pid, "tid": tid, "args": args}


def _layer_spans(step: int, dispatches: list[KernelDispatch], batch: BatchComposition,
                 layers: list[tuple[int, str]], step_us: int) -> list[dict]:
    """The kernels of one step on the layer tracks, in layer order, each layer an equal share."""
    share = step_us // max(1, len(layers))
    out = []
    for i, (layer, kind) in enumerate(layers):
        t0 = step * step_us + i * share
        if kind == "mla":
            out.append(_span("mla", t0, share, LAYER_PID, layer, {"num_tokens": batch.num_tokens,
                                                                  "num_seqs": len(batch.req_ids)}))
            continue
        mine = [d for d in dispatches if d.layer == layer]
        for j, d in enumerate(mine):
            part = share // len(mine)
            out.append(_span(d.kernel, t0 + j * part, part, LAYER_PID, layer, {
                "phase": d.phase, "backend": d.backend, "num_seqs": d.num_seqs, "num_tokens": d.num_tokens}))
    return out


def _request_spans(batch: BatchComposition, step_us: int) -> list[dict]:
    """The requests of one step's batch, each a span on its own track (phase, tokens, context)."""
    cu = batch.cu_seqlens
    return [_span(phase, batch.step * step_us, step_us, REQUEST_PID, rid,
                  {"tokens": cu[i + 1] - cu[i], "context_len": batch.context_lens[i],
                   "state_index": batch.state_indices[i]})
            for i, (rid, phase) in enumerate(zip(batch.req_ids, batch.phases))]


def _lifetimes(events: list[TraceEvent], last_step: int, step_us: int) -> list[dict]:
    """One span per request, from the step it arrived to the end of the step it finished in."""
    start, end, label = {}, {}, {}
    for e in events:
        if isinstance(e, RequestArrived):
            start.setdefault(e.req_id, e.step)
        elif isinstance(e, (RequestFinished, RequestAborted)):
            end[e.req_id] = e.step
            label[e.req_id] = getattr(e, "reason", "aborted")
    return [_span(f"request {rid}", s * step_us, (end.get(rid, last_step) + 1 - s) * step_us, REQUEST_PID, rid,
                  {"finish": label.get(rid, "unfinished")}) for rid, s in start.items()]


def _instants(events: list[TraceEvent], step_us: int) -> list[dict]:
    """Cache operations, preemptions and speculative verifies as instants at their step's start."""
    out = []
    for e in events:
        ts = e.step * step_us
        if isinstance(e, CacheEvent):
            tid, pid = (e.req_id, REQUEST_PID) if e.req_id is not None else (CACHE_TID, ENGINE_PID)
            out.append(_instant(f"cache {e.op}", ts, pid, tid, {"position": e.position, "node_id": e.node_id,
                                                                 **e.detail}))
        elif isinstance(e, Preemption):
            out.append(_instant("preempted", ts, REQUEST_PID, e.req_id, {"reason": e.reason,
                                                                         "freed_pages": e.freed_pages}))
        elif isinstance(e, SpecVerify):
            out.append(_instant("verify", ts, REQUEST_PID, e.req_id, {
                "drafts": len(e.drafts), "accepted": e.num_accepted, "kept": e.kept, "strategy": e.strategy}))
        elif isinstance(e, PoolSnapshot):
            out.append({"name": "pool bytes", "ph": "C", "ts": ts, "pid": ENGINE_PID, "tid": STEP_TID,
                        "args": {k: v for k, v in e.used_bytes.items() if k != "total"}})
    return out


def _check(events, kda_layers, mla_layers, step_us) -> None:
    if not isinstance(events, (list, tuple)) or not all(isinstance(e, TraceEvent) for e in events):
        raise ValueError("events: must be a list of trace events (kda_ref.trace.TraceEvent)")
    for name, ids in (("kda_layers", kda_layers), ("mla_layers", mla_layers)):
        if ids is not None and (not isinstance(ids, (list, tuple)) or not all(type(i) is int and i >= 0 for i in ids)):
            raise ValueError(f"{name}: must be a list of layer indices (ints >= 0), got {ids!r}")
    if type(step_us) is not int or step_us < 1:
        raise ValueError(f"step_us: must be an int >= 1, got {step_us!r}")


def to_chrome_trace(events: list[TraceEvent], *, kda_layers: list[int] | None = None,
                    mla_layers: list[int] | None = None, step_us: int = STEP_US) -> dict:
    """``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}`` for ``events``.

    ``kda_layers`` / ``mla_layers`` give the layer layout (a trace header's ``kda_layers`` /
    ``mla_layers``); without them the KDA layers are those that dispatched a kernel and no MLA track
    is drawn. Every event has ``name``, ``ph``, ``ts``, ``pid`` and ``tid``; spans have ``dur >= 0``;
    the list is sorted by ``ts`` (metadata first), so steps come in order.
    """
    _check(events, kda_layers, mla_layers, step_us)
    kda = sorted(set(kda_layers) if kda_layers is not None else
                 {e.layer for e in events if isinstance(e, KernelDispatch)})
    layers = sorted([(i, "kda") for i in kda] + [(i, "mla") for i in (mla_layers or [])])
    batches = {e.step: e for e in events if isinstance(e, BatchComposition)}
    dispatches: dict[int, list[KernelDispatch]] = {}
    for e in events:
        if isinstance(e, KernelDispatch):
            dispatches.setdefault(e.step, []).append(e)
    last = max((e.step for e in events), default=0)
    out = [_meta(ENGINE_PID, STEP_TID, "process_name", "engine"), _meta(ENGINE_PID, STEP_TID, "thread_name", "steps"),
           _meta(ENGINE_PID, CACHE_TID, "thread_name", "prefix cache"),
           _meta(REQUEST_PID, 0, "process_name", "requests"), _meta(LAYER_PID, 0, "process_name", "layers")]
    out += [_meta(LAYER_PID, i, "thread_name", f"layer {i} {kind.upper()}") for i, kind in layers]
    rids = sorted({e.req_id for e in events if isinstance(e, RequestArrived)})
    out += [_meta(REQUEST_PID, r, "thread_name", f"request {r}") for r in rids]
    timed = _lifetimes(events, last, step_us) + _instants(events, step_us)
    for step, batch in sorted(batches.items()):
        timed.append(_span(f"step {step}", step * step_us, step_us, ENGINE_PID, STEP_TID, {
            "req_ids": batch.req_ids, "cu_seqlens": batch.cu_seqlens, "num_tokens": batch.num_tokens}))
        timed += _request_spans(batch, step_us)
        timed += _layer_spans(step, dispatches.get(step, []), batch, layers, step_us)
    timed.sort(key=lambda ev: (ev["ts"], -ev.get("dur", 0)))  # stable: an enclosing span before what it holds
    return {"traceEvents": out + timed, "displayTimeUnit": "ms",
            "otherData": {"time_axis": f"logical: one engine step = {step_us} us", "source": "kda-viz"}}


__all__ = ["STEP_US", "to_chrome_trace"]
