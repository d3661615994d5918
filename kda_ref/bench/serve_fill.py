"""The server as its prefix cache fills: does a long-running cached server stay as fast as one without a cache?

    kda-ref bench serve --idle 5 [--model trained] [--max-tokens 32]
    kda-ref bench serve --fill [--model trained] [--fill-budget-mb 8] [--fill-rounds 1] [--max-tokens 32] [--concurrency 8]
                               [--caches none radix block] [--out FILE]

Per prefix cache, a fresh server with a ``--fill-budget-mb`` pool, without and with a Live reader, runs the
phases **idle**, **fill** (unique prompts up to 16x :func:`capacity_requests`) and **shared**; the no-cache server
runs the same phases in the same process. Nothing here asserts a timing.
Design notes: ``docs/benchmarks.md#the-server-as-its-cache-fills-phases``
"""

from __future__ import annotations

import contextlib
import json
import random
import statistics
import subprocess
import sys
import time

import torch
from tqdm import tqdm

from ..engine import LLM, SamplingParams
from ..server.engine_core import CoreSpec
from ..server.load import run_load, summarize
from ..server.models import model_source
from ..server.serve import ServerThread, make_process_server
from .served import CACHES, SERVED, scrape

FILL_FACTORS = (1, 4, 16)
PROMPT_TOKENS = 128  # a unique prompt's length
SHARED_PREFIX, SHARED_REQUESTS = 256, 8


# the Live page's polling, as a process of its own (as the Streamlit page is): a reader thread inside the
# server's process would parse each answer under the server's GIL and slow the engine's thread for it
_READER = """
import json, sys, time, urllib.request
url, every, last = sys.argv[1], float(sys.argv[2]), -1
while True:
    time.sleep(every)
    try:
        with urllib.request.urlopen(f"{url}/kda/trace?since={last}", timeout=30) as r:
            last = json.loads(r.read()).get("last_step") or last
    except OSError:
        pass
"""


# one request, streamed and then answered whole, timed by a process of its own (best of 3 after a warm-up
# each), as a real client is
_IDLE_CLIENT = """
import json, statistics, sys
from kda_ref.server.load import stream_one
url, prompt, n, k = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = {s: [stream_one(url, prompt, n, stream=s) for _ in range(k + 1)] for s in (True, False)}
bad = [t.error for ts in runs.values() for t in ts if t.error]
if bad:
    sys.exit(f"the idle request failed: {bad[0]}")
pick = min if k <= 3 else statistics.median
print(*(pick(t.e2e for t in runs[s][1:]) for s in (True, False)))
"""


@contextlib.contextmanager
def live_reader(url: str, every_s: float = 1.0):
    """A process polling ``/kda/trace`` every ``every_s`` as the Live page does, until the block ends (then
    killed and waited for: none is left behind)."""
    proc = subprocess.Popen([sys.executable, "-c", _READER, url, str(every_s)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(30)


def capacity_requests(llm: LLM, max_tokens: int) -> int:
    """How many finished requests' leftovers the pool holds: one state and the KV of the prompt and the
    answer each (a radix cache also keeps chunk-boundary checkpoints, so it fills sooner)."""
    sizes = llm.pool.sizes
    kv = (PROMPT_TOKENS + max_tokens) * sizes.kv_page_bytes // sizes.page_size  # the same for every cache
    return max(1, llm.pool.budget_bytes // (sizes.state_bytes + kv))


def unique_prompts(n: int, seed: int, vocab: int) -> list[list[int]]:
    rnd = random.Random(seed)
    return [[rnd.randrange(1, min(vocab, 256)) for _ in range(PROMPT_TOKENS)] for _ in range(n)]


def idle_ratio(offline: LLM, url: str, max_tokens: int, runs: int = 3) -> dict:
    """One request on the idle server against ``offline`` ``generate`` (an engine of the server's settings
    in this process), ``runs`` times each after a warm-up: the best of 3 or fewer, the median of more. The
    client is a process of its own: a client thread here would share this process's cores and GIL and be
    timed as the server's cost."""
    prompt = unique_prompts(1, 10**6, 256)[0]
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)

    def timed(fn) -> float:
        fn()
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times) if runs <= 3 else statistics.median(times)

    off = timed(lambda: offline.generate([prompt], params, use_tqdm=False))
    client = subprocess.run([sys.executable, "-c", _IDLE_CLIENT, url, json.dumps(prompt), str(max_tokens),
                             str(runs)], capture_output=True, text=True, timeout=600)
    if client.returncode:
        raise RuntimeError(client.stderr.strip().splitlines()[-1] if client.stderr.strip() else "idle client failed")
    streamed, whole = (float(x) for x in client.stdout.split()[-2:])
    return {"offline_ms": off * 1000, "server_ms": streamed * 1000, "server_over_offline": streamed / off,
            "whole_ms": whole * 1000, "whole_over_offline": whole / off}


def run_phase(srv, url: str, name: str, requests, concurrency: int) -> dict:
    """One phase of :func:`run_cache`: ``requests`` sent ``concurrency`` at a time to the process server
    ``srv`` at ``url``; its row (latencies, wall time, the engine loop's time per step, prefix-cache hits)."""
    engine = srv.loop  # the engine process's client: its loop's counters are read through the pipe
    c0 = engine.counters()
    before = scrape(url)
    bar = tqdm(total=len(requests), desc=name, unit="req", leave=False)
    timings, duration = run_load(url, requests, concurrency=concurrency, progress=lambda: bar.update(1))
    bar.close()
    c1 = engine.counters()
    row, steps = summarize(timings, duration), max(1, c1["steps"] - c0["steps"])
    hits = scrape(url).get("kda_prefix_cache_hits_total", 0.0) - before.get("kda_prefix_cache_hits_total", 0.0)
    e2e = sorted(t.e2e for t in timings if t.e2e is not None)
    return {"phase": name, "requests": len(requests), "failed": row["failed"], "wall_s": duration,
            "latency_mean_ms": statistics.fmean(e2e) * 1000, "latency_p90_ms": e2e[int(0.9 * (len(e2e) - 1))] * 1000,
            "step_ms": (c1["step_seconds"] - c0["step_seconds"]) / steps * 1000,
            "observers_ms": (c1["observer_seconds"] - c0["observer_seconds"]) / steps * 1000, "hit_tokens": int(hits)}


def run_cache(model_name: str, cache: str, *, reader: bool, budget: int, max_tokens: int, concurrency: int,
              seed: int) -> list[dict]:
    """The three parts of the module docstring on one fresh server (as ``kda-ref serve`` runs: the engine in
    a process of its own, the live trace on); one row per phase."""
    engine = dict(memory_budget_bytes=budget, max_num_seqs=concurrency, **CACHES[cache])
    srv = make_process_server(CoreSpec(SERVED[model_name], engine, torch.get_num_threads(), 4096, "bench",
                                       trace_steps=256))
    offline = LLM(model_source(SERVED[model_name])[0], **engine)  # the same engine here: the idle baseline
    rows, vocab = [], offline.config.vocab_size
    with ServerThread(srv) as url, (live_reader(url) if reader else contextlib.nullcontext()):
        idle = idle_ratio(offline, url, max_tokens)
        cap, sent = capacity_requests(offline, max_tokens), 0
        for k in FILL_FACTORS:
            prompts = unique_prompts(k * cap - sent, seed + 1000 * k, vocab)
            rows.append(run_phase(srv, url, f"fill {k}x", [(p, max_tokens) for p in prompts], concurrency))
            sent = k * cap
        prefix = unique_prompts(1, seed + 7, vocab)[0] * (SHARED_PREFIX // PROMPT_TOKENS)
        shared = [(prefix + q[:16], max_tokens) for q in unique_prompts(SHARED_REQUESTS, seed + 8, vocab)]
        rows.append(run_phase(srv, url, "shared prefix", shared, 1))  # one at a time: each can reuse the last
    for r in rows:
        r.update(cache=cache, reader=reader, capacity_requests=cap, **idle)
    return rows


def _ratio(rows: list[dict], r: dict, key: str) -> float | None:
    """``r[key]`` over the no-cache server's in the same round, reader and phase (None without one)."""
    b = next((x for x in rows if x["cache"] == "none" and x.get("round", 0) == r.get("round", 0)
              and x["reader"] == r["reader"] and x["phase"] == r["phase"]), None)
    return r[key] / b[key] if b else None


def to_markdown(rows: list[dict]) -> str:
    """One line per (cache, reader, phase): medians over the rounds, the ratios to no cache paired round by
    round (each round's servers ran back to back, so a ratio compares like with like on a drifting machine)."""
    head = ("| cache | reader | phase | requests | rounds | latency mean / p90 ms | x no cache | wall s | x no cache "
            "| engine ms/step | observers ms/step | hit tokens | idle ms: streamed / whole / offline |")
    lines, med = [head, "|" + "---|" * 13], statistics.median
    keys = list(dict.fromkeys((r["cache"], r["reader"], r["phase"]) for r in rows))
    for cache, reader, phase in keys:
        rs = [r for r in rows if (r["cache"], r["reader"], r["phase"]) == (cache, reader, phase)]
        lat, wall = ([_ratio(rows, r, k) for r in rs] for k in ("latency_mean_ms", "wall_s"))
        fmt = lambda v: "-" if None in v else (f"{med(v):.2f}" if len(v) == 1 else  # noqa: E731
                                               f"{med(v):.2f} ({min(v):.2f}-{max(v):.2f})")
        m = {k: med(r[k] for r in rs) for k in ("latency_mean_ms", "latency_p90_ms", "wall_s", "step_ms",
                                                "observers_ms", "server_ms", "offline_ms", "server_over_offline", "whole_ms",
                                                "whole_over_offline")}
        lines.append(f"| {cache} | {'yes' if reader else 'no'} | {phase} | {rs[0]['requests']} | {len(rs)} "
                     f"| {m['latency_mean_ms']:.0f} / {m['latency_p90_ms']:.0f} | {fmt(lat)} | {m['wall_s']:.1f} "
                     f"| {fmt(wall)} | {m['step_ms']:.2f} | {m['observers_ms']:.2f} | {int(med(r['hit_tokens'] for r in rs))} "
                     f"| {m['server_ms']:.0f} ({m['server_over_offline']:.2f}x) / {m['whole_ms']:.0f} "
                     f"({m['whole_over_offline']:.2f}x) / {m['offline_ms']:.0f} |")
    return "\n".join(lines)


def idle_rounds(model_name: str, rounds: int, max_tokens: int, runs: int = 20) -> list[dict]:
    """``kda-ref bench serve --idle N``: N fresh servers without a cache (the engine in a process of its own,
    no live trace), each timing one request on the idle server, ``runs`` times, against offline
    ``generate`` (medians); one row a round."""
    engine = dict(max_num_seqs=8)
    rows = []
    for rnd in tqdm(range(rounds), desc="idle", unit="server"):
        srv = make_process_server(CoreSpec(SERVED[model_name], engine, torch.get_num_threads(), 64, "bench"))
        offline = LLM(model_source(SERVED[model_name])[0], **engine)
        with ServerThread(srv) as url:
            rows.append(dict(idle_ratio(offline, url, max_tokens, runs), round=rnd))
    print("| round | offline ms | streamed ms | x offline | whole ms | x offline |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['round']} | {r['offline_ms']:.1f} | {r['server_ms']:.1f} | {r['server_over_offline']:.2f} "
              f"| {r['whole_ms']:.1f} | {r['whole_over_offline']:.2f} |")
    med = statistics.median
    print(f"median of rounds: streamed {med(r['server_over_offline'] for r in rows):.2f}x, "
          f"whole {med(r['whole_over_offline'] for r in rows):.2f}x offline")
    return rows


def cli(a) -> list[dict]:
    """``kda-ref bench serve --fill``: every cache, without then with a reader, ``--fill-rounds`` times (the
    caches' order reversed every other round); prints the table."""
    rows = []
    for rnd in range(a.fill_rounds):
        for reader in (False, True):
            for cache in (a.caches if rnd % 2 == 0 else a.caches[::-1]):
                got = run_cache(a.model, cache, reader=reader, budget=int(a.fill_budget_mb * 2**20),
                                max_tokens=a.max_tokens, concurrency=a.concurrency or 8, seed=a.seed + rnd)
                rows += [dict(r, round=rnd) for r in got]
    print(to_markdown(rows))
    return rows
