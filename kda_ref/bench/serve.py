"""The server under load: throughput and TTFT / TPOT / ITL / e2e percentiles by prefix cache and arrival rate,
checked against the server's own ``/metrics``.

    kda-ref bench serve [--model trained] [--family multi_turn] [--num-requests 48] [--rates 2 4 8]
                        [--concurrency N] [--caches none radix block] [--max-tokens 24] [--sweep] [--out FILE]
    kda-ref bench serve --url http://127.0.0.1:8000 [--api-key KEY] [--rates 4] ...   # a running server

Per cache and rate, a fresh server (:func:`~kda_ref.server.serve.make_process_server` on a
:class:`~kda_ref.server.serve.ServerThread`) loaded by :mod:`kda_ref.server.load` with :mod:`kda_ref.workloads`
prompts. Nothing here asserts a timing. Design notes: ``docs/benchmarks.md#the-server-under-load-sweep-and-url``
"""

from __future__ import annotations


import torch
from tqdm import tqdm

from ..engine.llm import model_config_of
from ..server.engine_core import CoreSpec
from ..server.load import run_load, summarize
from ..server.models import model_source
from ..server.serve import ServerThread, make_process_server
from ..workloads import make
from . import serve_fill
from .report import report
from .served import CACHES, SERVED, scrape

TTFT_P99_LIMIT_MS = 2000.0


def workload_requests(family: str, n: int, max_tokens: int, seed: int, vocab: int) -> list[tuple[list[int], int]]:
    """``(prompt token ids, max_tokens)`` per request of the family's tiny scale, in arrival order."""
    w = make(family, seed=seed, scale="tiny", num_requests=n, vocab_size=min(vocab, 256))
    return [(list(r.prompt), max(1, min(max_tokens, r.max_tokens))) for r in w.requests]


def run_external(url: str, requests, *, rate=None, concurrency=None, seed=0, api_key=None) -> dict:
    """The load against a server already running at ``url`` (``kda-ref serve``, watched on the Live page):
    its counters are read before and after, and the difference is this run's."""
    before = scrape(url)
    bar = tqdm(total=len(requests), desc=f"{url} @ {rate or concurrency}", unit="req", leave=False)
    timings, duration = run_load(url, requests, rate=rate, concurrency=concurrency, seed=seed, api_key=api_key,
                                 progress=lambda: bar.update(1))
    bar.close()
    after = scrape(url)
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    return {"cache": "(that server's)", "rate": rate, "concurrency": concurrency, **summarize(timings, duration),
            **server_side(delta)}


def server_side(m: dict[str, float]) -> dict:
    """What the server reports for the run: requests ended by finish reason, output tokens, mean TTFT."""
    ended = sum(v for k, v in m.items() if k.startswith("kda_request_success_total"))
    count = m.get("kda_time_to_first_token_seconds_count", 0.0)
    return {"server_requests": int(ended), "server_output_tokens": int(m.get("kda_generation_tokens_total", 0)),
            "server_ttft_mean_ms": m["kda_time_to_first_token_seconds_sum"] / count * 1000 if count else None,
            "server_cache_hit_tokens": int(m.get("kda_prefix_cache_hits_total", 0))}


def run_one(model_name: str, cache: str, requests, *, rate=None, concurrency=None, max_num_seqs=16, seed=0) -> dict:
    """One server as ``kda-ref serve`` runs it (the engine in a process of its own, no live trace), one
    load; the client's summary and the server's counters side by side."""
    spec = CoreSpec(SERVED[model_name], dict(max_num_seqs=max_num_seqs, **CACHES[cache]), torch.get_num_threads(),
                    max(1, len(requests)), "bench")
    with ServerThread(make_process_server(spec)) as url:
        bar = tqdm(total=len(requests), desc=f"{cache} @ {rate or concurrency}", unit="req", leave=False)
        timings, duration = run_load(url, requests, rate=rate, concurrency=concurrency, seed=seed,
                                     progress=lambda: bar.update(1))
        bar.close()
        row = {"cache": cache, "rate": rate, "concurrency": concurrency, **summarize(timings, duration),
               **server_side(scrape(url))}
    return row


def sweep(run, start: float, limit: int = 8) -> list[dict]:
    """Double the rate from ``start`` until TTFT p99 passes 2 s (at most ``limit`` rates); ``run(rate)``
    runs one load and returns its row."""
    rows, rate = [], start
    for _ in range(limit):
        rows.append(run(rate))
        if (rows[-1]["ttft_p99_ms"] or 0) > TTFT_P99_LIMIT_MS:
            break
        rate *= 2
    return rows


COLUMNS = (("cache", "cache", "{}"), ("load", None, "{}"), ("req/s", "request_throughput", "{:.2f}"),
           ("out tok/s", "output_tok_s", "{:.0f}"), ("TTFT p50/p90/p99 ms", "ttft", None),
           ("TPOT p50/p90/p99 ms", "tpot", None), ("ITL p50/p90/p99 ms", "itl", None),
           ("cache hit tokens", "server_cache_hit_tokens", "{}"),
           ("TTFT mean ms client / server", None, None), ("requests / tokens client = server", None, None))


def _cell(row: dict, head: str, key, fmt) -> str:
    if head == "load":
        return f"{row['rate']}/s" if row["rate"] is not None else f"{row['concurrency']} at once"
    if head.startswith("TTFT mean"):
        return " / ".join("-" if v is None else f"{v:.0f}" for v in (row["ttft_mean_ms"], row["server_ttft_mean_ms"]))
    if head.startswith("requests /"):
        return (f"{row['completed']}/{row['output_tokens']} = {row['server_requests']}/{row['server_output_tokens']}")
    if fmt is None:
        return "/".join("-" if row[f"{key}_p{q}_ms"] is None else f"{row[f'{key}_p{q}_ms']:.0f}" for q in (50, 90, 99))
    return fmt.format(row[key])


def to_markdown(rows: list[dict]) -> str:
    head = "| " + " | ".join(h for h, _, _ in COLUMNS) + " |"
    lines = [head, "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(_cell(r, h, k, f) for h, k, f in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def cli(a) -> None:
    """The benchmark with parsed arguments (``kda-ref bench serve`` parses them before importing this).
    ``--url``: load that running server (its own settings) instead of starting one per cache."""
    from ..utils import server_threads

    torch.set_num_threads(a.threads or server_threads())
    if a.idle:
        report(a, {"idle": serve_fill.idle_rounds(a.model, a.idle, a.max_tokens)})
        return
    if a.fill:
        report(a, {"fill": serve_fill.cli(a)})
        return
    vocab = 256 if a.url else model_config_of(model_source(SERVED[a.model])[0]).vocab_size
    requests = workload_requests(a.family, a.num_requests, a.max_tokens, a.seed, vocab)
    loads = [None] if a.concurrency else a.rates

    def run(cache: str, rate):
        if a.url:
            return run_external(a.url, requests, rate=rate, concurrency=a.concurrency, seed=a.seed, api_key=a.api_key)
        return run_one(a.model, cache, requests, rate=rate, concurrency=a.concurrency, max_num_seqs=a.max_num_seqs,
                       seed=a.seed)

    rows = [run(cache, load) for cache in (["(url)"] if a.url else a.caches) for load in loads]
    print(to_markdown(rows))
    swept = sweep(lambda rate: run("radix", rate), a.rates[0]) if a.sweep else []
    report(a, {"rows": rows, "sweep": swept}, *([f"{'that server' if a.url else 'radix cache'}, rate doubled "
                                                 f"until TTFT p99 > 2 s:\n{to_markdown(swept)}"] if swept else []))


if __name__ == "__main__":  # as `kda-ref bench serve` runs it
    from .entry import script

    raise SystemExit(script("serve"))
