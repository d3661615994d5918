"""The server as its prefix cache fills: does a long-running cached server stay as fast as one without a cache?

    kda-ref bench serve --fill [--model trained] [--fill-budget-mb 8] [--max-tokens 32] [--concurrency 8]
                               [--caches none radix block] [--out FILE]

For each prefix cache, a fresh server with its live trace on (as ``kda-ref serve`` runs by default), a pool of
``--fill-budget-mb``, and a client of its own; twice, without and with a Live reader attached (a thread
polling ``/kda/trace`` every second, as the Live page does):

1. **idle**: one request on the idle server against offline ``generate`` of the same engine settings;
2. **fill**: unique prompts (random token ids: nothing to share) until 1x, 4x and 16x as many requests as
   the pool can keep the leftovers of (each finished request leaves at least its final state and its KV
   to the cache: :func:`capacity_requests`); per phase the clients' mean and p90 latency, the phase's wall time, and the engine
   thread's time per step in the engine (``EngineLoop.step_seconds``) and in the observers (metrics and
   the live trace, ``EngineLoop.observer_seconds``);
3. **shared**: requests that share one long prefix; the prefix-cache hits ``/metrics`` counts for them.

The no-cache server runs the same phases in the same process, so the ratios compare like with like on a
noisy machine. Nothing here asserts a timing; the table goes in docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import random
import statistics
import threading
import time
import urllib.request

from tqdm import tqdm

from ..engine import LLM, SamplingParams
from ..server.live import LiveTrace
from ..server.load import run_load, summarize
from ..server.serve import ServerThread, make_server
from .serve import CACHES, scrape

FILL_FACTORS = (1, 4, 16)
PROMPT_TOKENS = 128  # a unique prompt's length
SHARED_PREFIX, SHARED_REQUESTS = 256, 8


@contextlib.contextmanager
def live_reader(url: str, every_s: float = 1.0):
    """A thread polling ``/kda/trace`` as the Live page does, until the block ends."""
    stop, last = threading.Event(), [-1]

    def poll():
        import json

        while not stop.wait(every_s):
            try:
                with urllib.request.urlopen(f"{url}/kda/trace?since={last[0]}", timeout=30) as r:
                    doc = json.loads(r.read())
                last[0] = doc.get("last_step") or last[0]
            except OSError:
                pass

    t = threading.Thread(target=poll, name="live-reader", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(60)


def capacity_requests(llm: LLM, max_tokens: int) -> int:
    """How many finished requests' leftovers the pool holds: one state and the KV of the prompt and the
    answer each (a radix cache also keeps chunk-boundary checkpoints, so it fills sooner)."""
    sizes = llm.pool.sizes
    kv = (PROMPT_TOKENS + max_tokens) * sizes.kv_page_bytes // sizes.page_size  # the same for every cache
    return max(1, llm.pool.budget_bytes // (sizes.state_bytes + kv))


def unique_prompts(n: int, seed: int, vocab: int) -> list[list[int]]:
    rnd = random.Random(seed)
    return [[rnd.randrange(1, min(vocab, 256)) for _ in range(PROMPT_TOKENS)] for _ in range(n)]


def idle_ratio(model, url: str, cache: str, budget: int, max_tokens: int) -> dict:
    """One request on the idle server against offline ``generate`` (same settings), best of 3 each."""
    prompt = unique_prompts(1, 10**6, 256)[0]
    offline = LLM(model, memory_budget_bytes=budget, **CACHES[cache])
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    off = best(lambda: offline.generate([prompt], params, use_tqdm=False))
    on = best(lambda: run_load(url, [(prompt, max_tokens)], concurrency=1))
    return {"offline_ms": off * 1000, "server_ms": on * 1000, "server_over_offline": on / off}


def _phase(srv, url: str, name: str, requests, concurrency: int) -> dict:
    loop = srv.loop
    s0, o0, n0 = loop.step_seconds, loop.observer_seconds, loop.llm.clock.step
    before = scrape(url)
    bar = tqdm(total=len(requests), desc=name, unit="req", leave=False)
    timings, duration = run_load(url, requests, concurrency=concurrency, progress=lambda: bar.update(1))
    bar.close()
    row, steps = summarize(timings, duration), max(1, loop.llm.clock.step - n0)
    hits = scrape(url).get("kda_prefix_cache_hits_total", 0.0) - before.get("kda_prefix_cache_hits_total", 0.0)
    e2e = sorted(t.e2e for t in timings if t.e2e is not None)
    return {"phase": name, "requests": len(requests), "failed": row["failed"], "wall_s": duration,
            "latency_mean_ms": statistics.fmean(e2e) * 1000, "latency_p90_ms": e2e[int(0.9 * (len(e2e) - 1))] * 1000,
            "step_ms": (loop.step_seconds - s0) / steps * 1000,
            "observers_ms": (loop.observer_seconds - o0) / steps * 1000, "hit_tokens": int(hits)}


def run_cache(model, cache: str, *, reader: bool, budget: int, max_tokens: int, concurrency: int,
              seed: int) -> list[dict]:
    """The three parts of the module docstring on one fresh server; one row per phase."""
    ring = LiveTrace()
    llm = LLM(model, tracer=ring, memory_budget_bytes=budget, max_num_seqs=concurrency, **CACHES[cache])
    srv = make_server(llm, ring, model_name="bench", max_waiting=4096)
    rows, vocab = [], model.config.vocab_size
    with ServerThread(srv) as url, (live_reader(url) if reader else contextlib.nullcontext()):
        idle = idle_ratio(model, url, cache, budget, max_tokens)
        cap, sent = capacity_requests(llm, max_tokens), 0
        for k in FILL_FACTORS:
            prompts = unique_prompts(k * cap - sent, seed + 1000 * k, vocab)
            rows.append(_phase(srv, url, f"fill {k}x", [(p, max_tokens) for p in prompts], concurrency))
            sent = k * cap
        prefix = unique_prompts(1, seed + 7, vocab)[0] * (SHARED_PREFIX // PROMPT_TOKENS)
        shared = [(prefix + q[:16], max_tokens) for q in unique_prompts(SHARED_REQUESTS, seed + 8, vocab)]
        rows.append(_phase(srv, url, "shared prefix", shared, 1))  # one at a time: each can reuse the last
    for r in rows:
        r.update(cache=cache, reader=reader, capacity_requests=cap, **idle)
    return rows


def to_markdown(rows: list[dict]) -> str:
    """One line per (cache, reader, phase), with the latency and wall time against no cache's."""
    base = {(r["reader"], r["phase"]): r for r in rows if r["cache"] == "none"}
    head = ("| cache | reader | phase | requests | latency mean / p90 ms | x no cache | wall s | x no cache "
            "| engine ms/step | observers ms/step | hit tokens | idle: server / offline |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        b = base.get((r["reader"], r["phase"]))
        lat = f"{r['latency_mean_ms'] / b['latency_mean_ms']:.2f}" if b else "-"
        wall = f"{r['wall_s'] / b['wall_s']:.2f}" if b else "-"
        lines.append(f"| {r['cache']} | {'yes' if r['reader'] else 'no'} | {r['phase']} | {r['requests']} "
                     f"| {r['latency_mean_ms']:.0f} / {r['latency_p90_ms']:.0f} | {lat} | {r['wall_s']:.1f} | {wall} "
                     f"| {r['step_ms']:.2f} | {r['observers_ms']:.2f} | {r['hit_tokens']} "
                     f"| {r['server_ms']:.0f} / {r['offline_ms']:.0f} ms ({r['server_over_offline']:.2f}x) |")
    return "\n".join(lines)


def cli(a, model) -> list[dict]:
    """``kda-ref bench serve --fill``: every cache, without then with a reader; prints the table."""
    rows = []
    for reader in (False, True):
        for cache in a.caches:
            rows += run_cache(model, cache, reader=reader, budget=int(a.fill_budget_mb * 2**20),
                              max_tokens=a.max_tokens, concurrency=a.concurrency or 8, seed=a.seed)
    print(to_markdown(rows))
    return rows
