"""A load generator for the server: streaming requests over plain HTTP at Poisson arrivals or a fixed
concurrency, timed on the client side as vLLM's serving benchmark times them (vLLM 0.32.0,
``vllm/benchmarks/serve.py``, ``vllm bench serve``: ``--request-rate`` with ``--burstiness 1`` for Poisson
arrivals, ``--max-concurrency``; TTFT, TPOT, ITL and e2e latency with their percentiles).

Each request is one thread holding one connection (``http.client``; no client library needed), reading
the server-sent events as they come: the time to the first chunk with text is its TTFT, the gaps between
chunks with text its ITLs, ``(e2e - TTFT) / (output tokens - 1)`` its TPOT (vLLM's client also times chunks
whose text is empty, ``vllm/benchmarks/lib/endpoint_request_func.py``). ``kda-ref bench serve`` runs it
against :class:`~kda_ref.server.serve.ServerThread` servers and compares with their ``/metrics``.
"""

from __future__ import annotations

import http.client
import json
import random
import statistics
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

from ..utils.stats import nearest_rank


@dataclass
class RequestTiming:
    """One request as its client saw it (seconds; ``error`` instead when it failed)."""

    sent: float
    ttft: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    end: float | None = None
    output_tokens: int = 0
    error: str | None = None

    @property
    def e2e(self) -> float | None:
        return None if self.end is None else self.end - self.sent

    @property
    def tpot(self) -> float | None:
        if self.ttft is None or self.e2e is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    def itls(self) -> list[float]:
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:])]


def _read_events(resp, timing: RequestTiming) -> None:
    """Read a stream to its ``[DONE]``; one that ends without it (a dropped connection) is an error."""
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if line == "data: [DONE]":
            return
        if not line.startswith("data: {"):
            continue
        obj = json.loads(line[6:])
        if "error" in obj:
            timing.error = obj["error"].get("message", "error")
            return
        if obj.get("usage"):
            timing.output_tokens = obj["usage"]["completion_tokens"]
        if obj.get("choices") and obj["choices"][0].get("text"):
            now = time.perf_counter()
            if timing.ttft is None:
                timing.ttft = now - timing.sent
            timing.chunk_times.append(now)
    timing.error = "the stream ended without [DONE]"


def _read_whole(resp, timing: RequestTiming) -> None:
    """Read a non-streamed answer: its usage's output tokens (the whole answer arrives at ``end``)."""
    obj = json.loads(resp.read())
    timing.output_tokens = obj["usage"]["completion_tokens"]


def stream_one(url: str, prompt, max_tokens: int, api_key: str | None = None, timeout: float = 600.0,
               stream: bool = True) -> RequestTiming:
    """One completion (greedy, ``ignore_eos``: exactly ``max_tokens`` tokens), timed; streamed, or with
    ``stream=False`` answered whole (then only ``e2e`` and ``output_tokens`` are known)."""
    parts = urllib.parse.urlsplit(url)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                       "stream": stream, **({"stream_options": {"include_usage": True}} if stream else {})})
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    timing = RequestTiming(sent=time.perf_counter())
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request("POST", parts.path.rstrip("/") + "/v1/completions", body=body, headers=headers)
        resp = conn.getresponse()
        if resp.status != 200:
            timing.error = f"HTTP {resp.status}"
        else:
            (_read_events if stream else _read_whole)(resp, timing)
    except Exception as e:  # noqa: BLE001 -- a refused or broken connection, a stream cut mid-line or mid-chunk:
        timing.error = repr(e)  # that request failed, and is counted so (run_load keeps every request)
    finally:
        conn.close()
        timing.end = time.perf_counter()
    return timing


def run_load(url: str, requests: list[tuple[object, int]], *, rate: float | None = None,
             concurrency: int | None = None, seed: int = 0, api_key: str | None = None,
             progress=None) -> tuple[list[RequestTiming], float]:
    """Send ``requests`` (``(prompt, max_tokens)``) at Poisson arrivals of ``rate`` per second (exponential
    gaps from ``seed``) or ``concurrency`` at a time (one of the two); ``(timings in request order, the
    seconds from the first send to the last answer)``. ``progress()`` is called as each request ends."""
    if (rate is None) == (concurrency is None):
        raise ValueError("rate / concurrency: give exactly one of them")
    out: list[RequestTiming | None] = [None] * len(requests)
    gate = threading.Semaphore(concurrency) if concurrency else None

    def one(i: int) -> None:
        try:
            out[i] = stream_one(url, *requests[i], api_key=api_key)
        finally:
            if gate is not None:
                gate.release()
            if progress is not None:
                progress()

    rng, threads, t0 = random.Random(seed), [], time.perf_counter()
    next_at = t0
    for i in range(len(requests)):
        if gate is not None:
            gate.acquire()
        else:
            time.sleep(max(0.0, next_at - time.perf_counter()))
            next_at += rng.expovariate(rate)
        th = threading.Thread(target=one, args=(i,), daemon=True)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    return [t for t in out if t is not None], time.perf_counter() - t0




def summarize(timings: list[RequestTiming], duration: float, percentiles=(50, 90, 99)) -> dict:
    """Throughput and the latency percentiles (milliseconds) of one run, as vLLM's benchmark prints them."""
    ok = [t for t in timings if t.error is None]
    out_tokens = sum(t.output_tokens for t in ok)
    row = {"requests": len(timings), "completed": len(ok), "failed": len(timings) - len(ok),
           "duration_s": duration, "request_throughput": len(ok) / duration if duration else 0.0,
           "output_tok_s": out_tokens / duration if duration else 0.0, "output_tokens": out_tokens}
    series = {"ttft": [t.ttft for t in ok if t.ttft is not None], "tpot": [t.tpot for t in ok if t.tpot is not None],
              "itl": [g for t in ok for g in t.itls()], "e2e": [t.e2e for t in ok if t.e2e is not None]}
    for name, values in series.items():
        row[f"{name}_mean_ms"] = statistics.fmean(values) * 1000 if values else None
        for q in percentiles:
            v = nearest_rank(values, q)
            row[f"{name}_p{q}_ms"] = None if v is None else v * 1000
    return row
