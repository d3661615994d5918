"""What publishing KV events costs an engine step: the same requests through the engine loop with no
publisher, with a publisher nobody subscribes to, and with a subscriber reading every batch (alternating
rounds, one process, one torch thread). Prints the median seconds per step of each and writes nothing.

    python scripts/kv_events_cost.py [--rounds 5] [--requests 48] [--cache radix|block] [--fill 0]

``--fill N``: one engine for every round, its cache first filled by N unique prompts of 300 tokens (a full cache:
the default 64 MiB budget holds about 400 of them), and what it held printed. ``--recorder``: instead of the
rounds, the recorder alone on that engine -- its first batch (the whole cache), then each step's batch while 48
more requests run, timed apart from the step.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch
import zmq

from kda_ref import LLM, SamplingParams
from kda_ref.kv_events.config import parse_kv_events_config
from kda_ref.server.kv_publish import kv_events_observer
from kda_ref.server.loop import EngineLoop
from kda_ref.train import trained_path

CACHES = {"radix": dict(prefix_cache="radix"), "block": dict(prefix_cache="block", block_size=64, hash_unit=16)}


def one_round(mode: str, n: int, cache: str, llm: LLM | None = None) -> float:
    llm = llm or LLM(trained_path(), max_num_seqs=8, **CACHES[cache])
    steps = llm.clock.step
    obs = kv_events_observer(llm, parse_kv_events_config({"enable_kv_cache_events": True, "endpoint": "tcp://*:0"})) \
        if mode != "off" else None
    loop = EngineLoop(llm, max_waiting=4096, observers=[obs] if obs else []).start()
    stop, reader = threading.Event(), None
    if mode == "subscribed":
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(obs.publisher.endpoint.replace("*", "127.0.0.1"))

        def read():
            while not stop.is_set():
                if sub.poll(50):
                    sub.recv_multipart()
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        time.sleep(0.3)
    stem = list(range(1, 200))
    streams = [loop.submit(stem[: 40 + (i * 37) % 150] + [200 + i % 50] * 8,
                           SamplingParams(max_tokens=16, ignore_eos=True)) for i in range(n)]
    for s in streams:
        list(s)
    loop.stop()
    stop.set()
    if reader is not None:
        reader.join()
        ctx.destroy(linger=0)
    return (loop.step_seconds + loop.observer_seconds) / max(1, llm.clock.step - steps)


def filled(cache: str, n: int) -> LLM:
    """One engine whose prefix cache holds ``n`` unique 300-token prompts (evicting once it is full)."""
    import random

    rng = random.Random(0)
    llm = LLM(trained_path(), max_num_seqs=8, **CACHES[cache])
    llm.generate([[rng.randrange(1, 250) for _ in range(300)] for _ in range(n)],
                 SamplingParams(max_tokens=1, ignore_eos=True), use_tqdm=False)
    print(f"{cache}: the cache holds {llm.prefix_cache.occupancy()}, {sum(map(len, llm.prefix_cache.kv_blocks().groups.values()))} blocks")
    return llm


def recorder_cost(llm: LLM, n: int) -> None:
    """Time the KV-event recorder's batch after every step of ``n`` requests, apart from the steps."""
    import random

    from kda_ref.server.kv_publish import KVEventRecorder

    rng = random.Random(1)
    t0 = time.perf_counter()
    recorder = KVEventRecorder(llm.prefix_cache)
    recorder.pending()
    recorder.commit()
    first, costs = time.perf_counter() - t0, []
    for i in range(n):
        llm.add_request([rng.randrange(1, 250) for _ in range(rng.randrange(40, 200))],
                        SamplingParams(max_tokens=16, ignore_eos=True))
        while i % 8 == 7 and llm.has_unfinished():
            llm.step()
            t0 = time.perf_counter()
            recorder.pending()
            recorder.commit()
            costs.append(time.perf_counter() - t0)
    print(f"recorder: first batch {first * 1e3:.1f} ms; per step mean {statistics.mean(costs) * 1e3:.3f} ms, median "
          f"{statistics.median(costs) * 1e3:.3f}, max {max(costs) * 1e3:.2f} ({len(costs)} steps)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--cache", choices=sorted(CACHES), default="radix")
    p.add_argument("--fill", type=int, default=0)
    p.add_argument("--recorder", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    times = {"off": [], "unsubscribed": [], "subscribed": []}
    llm = filled(a.cache, a.fill) if a.fill else None
    if a.recorder:
        return recorder_cost(llm or LLM(trained_path(), max_num_seqs=8, **CACHES[a.cache]), a.requests)
    one_round("off", 8, a.cache, llm)  # warm-up
    for _ in range(a.rounds):
        for mode in times:
            times[mode].append(one_round(mode, a.requests, a.cache, llm))
    for mode, ts in times.items():
        print(f"{a.cache} {mode:>12}: median {statistics.median(ts) * 1e3:.3f} ms/step "
              f"(min {min(ts) * 1e3:.3f}, max {max(ts) * 1e3:.3f}; {len(ts)} rounds)")


if __name__ == "__main__":
    main()
