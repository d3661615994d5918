"""What the live trace costs a server's step does not grow with what its prefix cache holds.

Counted, not timed: the pool entries a step's trace records plus the radix-tree nodes (or block units) its
cache snapshots visit, per step, with a reader attached, after filling the cache with 1x and then 10x as
many unique requests (the tree snapshot's bound lowered so that the first fill already passes it). A
snapshot that walks the whole tree, or a pool snapshot that lists every unit the cache holds, grows with
the fill and fails it. The server reads ``LLM.stats()`` after every step: the radix tree's counts are kept
as it changes, not walked."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("uvicorn")

from kda_ref import LLM, ModelConfig, SamplingParams  # noqa: E402
from kda_ref.cache.radix.tree import TreeNode  # noqa: E402
from kda_ref.model import HybridModel  # noqa: E402
from kda_ref.server.live import LiveTrace, approx_json_bytes  # noqa: E402
from kda_ref.server.serve import make_server  # noqa: E402

PARAMS = SamplingParams(max_tokens=3, ignore_eos=True)
FILL, GROWTH = 12, 10  # requests before the first measurement; how many times more before the second


def _prompt(i: int) -> list[int]:
    return [(7 * i + 3 * j + i * j) % 250 + 1 for j in range(24 + i % 5)]


class _Visits:
    """Counts every read of a radix node's ``children`` while :attr:`on` (the walks a trace makes)."""

    def __init__(self):
        self.on, self.n = False, 0

    def __enter__(self):
        visits, real = self, object.__getattribute__

        def counting(node, name):
            if name == "children" and visits.on:
                visits.n += 1
            return real(node, name)

        TreeNode.__getattribute__ = counting
        return self

    def __exit__(self, *exc):
        del TreeNode.__getattribute__


def _measure(srv, ring, visits, start: int, n: int) -> float:
    """Run ``n`` unique requests watched by a reader; the tracing work per engine step."""
    loop, w0, v0, s0 = srv.loop, ring.work, visits.n, srv.loop.llm.clock.step
    for b in range(start, start + n, 4):
        ring.since(1 << 60)  # a reader polls between bursts: snapshots are taken
        streams = [loop.submit(_prompt(i), PARAMS) for i in range(b, min(start + n, b + 4))]
        for s in streams:
            assert [k for k, _ in s][-1] == "done"
    steps = loop.llm.clock.step - s0
    return (ring.work - w0 + visits.n - v0) / steps


@pytest.mark.parametrize("cache", ["radix", "block"])
def test_a_steps_tracing_work_stays_flat_while_the_cache_grows_tenfold(cache, monkeypatch):
    import kda_ref.server.live as live_mod

    snapshots = []
    real_snapshot = live_mod.cache_picture
    monkeypatch.setattr(live_mod, "cache_picture", lambda *a, **k: snapshots.append(1) or real_snapshot(*a, **k))
    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    ring = LiveTrace(64, max_tree_nodes=16, snapshot_every_s=0)  # a bound the first fill already passes; a
    # snapshot after every finished request (the most the ring takes)
    kw = dict(block_size=16, hash_unit=16, mamba_cache_mode="all") if cache == "block" else {}
    llm = LLM(model, tracer=ring, prefix_cache=cache, memory_budget_bytes=256 << 20, **kw)
    srv = make_server(llm, ring, model_name="micro")
    with _Visits() as visits:
        ring_after_step = ring.after_step

        def traced(*a, **k):  # count node reads inside the trace's own work only
            visits.on = True
            try:
                return ring_after_step(*a, **k)
            finally:
                visits.on = False

        ring.after_step = traced
        srv.loop.start()
        try:
            _measure(srv, ring, visits, 0, FILL)
            small = _measure(srv, ring, visits, FILL, 8)
            _measure(srv, ring, visits, FILL + 8, FILL * GROWTH)
            held = llm.stats()["cached_kv_tokens"]
            n0, v0 = len(snapshots), visits.n
            large = _measure(srv, ring, visits, FILL * (GROWTH + 1) + 8, 8)
            per_snapshot = (visits.n - v0) / max(1, len(snapshots) - n0)
        finally:
            srv.loop.stop(drain=False)
    assert held > 5 * FILL * 24  # the cache really grew (nothing evicted it)
    assert small > 0 and large < 2 * small, (small, large)
    assert len(snapshots) > n0 and per_snapshot <= 4 * ring.max_tree_nodes  # a snapshot walks its bound only


def test_the_trees_counts_are_kept_not_walked():
    """``LLM.stats()`` (every server step) reads the radix tree's state and KV counts without a walk; the
    tree's own check compares them with one."""
    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    llm = LLM(model, prefix_cache="radix")
    llm.generate([_prompt(i) for i in range(6)], PARAMS, use_tqdm=False)
    tree = llm.prefix_cache.tree
    with _Visits() as visits:
        visits.on = True
        stats = llm.stats()
        visits.on = False
    assert visits.n == 0 and stats["cached_states"] == tree.num_states() > 0
    tree.check()  # the kept counts equal a walk's
    assert stats["cached_kv_tokens"] == sum(len(n.value) for n in tree.nodes())


@pytest.mark.parametrize("bound", ["steps", "bytes"])
def test_a_reader_that_joins_late_rebuilds_the_pools_owners_exactly(bound):
    """The ring's snapshots carry each step's changes; a window that starts after the ring dropped the first
    steps (past ``max_steps``, or past ``max_bytes``) gets the owners before its first record
    (``pool_base``) and rebuilds, at its last step, exactly what the pool holds -- the prefix cache's pages
    included. Bounded in bytes, the ring's records stay under the bound, each estimated within 35% of its
    JSON."""
    import json
    from kda_ref.server.loop import EngineLoop
    from model_viz.scenarios import engine_trace as et
    from model_viz.scenarios import live

    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    # far fewer steps (or bytes) than the run: the window starts mid-run
    ring = LiveTrace(6) if bound == "steps" else LiveTrace(10_000, max_bytes=40_000)
    llm = LLM(model, tracer=ring, prefix_cache="radix")
    ring.attach()  # another reader watches all along (the ring records while one does)
    loop = EngineLoop(llm, observers=[ring]).start()
    try:
        for b in range(0, 12, 3):
            for s in [loop.submit(_prompt(i), PARAMS) for i in range(b, b + 3)]:
                list(s)
    finally:
        loop.stop(drain=True)
    doc = ring.since(-1)
    assert doc["first_step"] > 1 and doc["pool_base"]  # steps were dropped; the base stands for them
    if bound == "bytes":
        sizes = [len(json.dumps(r, separators=(",", ":"))) for r in doc["records"]]
        assert 1 < len(sizes) < doc["last_step"] - 1 and ring.bytes <= ring.max_bytes
        assert sum(sizes) <= 1.35 * ring.max_bytes
        assert all(0.65 <= approx_json_bytes(r) / n <= 1.35 for r, n in zip(doc["records"], sizes))
    window = live.LiveWindow(max_steps=4)  # and the window keeps fewer still: it folds what it drops
    window.add(doc)
    views = et.engine_steps(window.events())
    want = {k: v for k, v in llm.pool.ownership().items() if v}
    got = {k: dict(views[-1].owners(k)) for k in want}
    assert got == {k: {u: (o if isinstance(o, (int, str)) else str(o)) for u, o in v.items()} for k, v in want.items()}
    assert any(o == "cache" or not isinstance(o, int) for v in got.values() for o in v.values())  # the cache's


def test_a_steps_trace_does_not_grow_with_the_context():
    """A token-granular radix cache gives a request one KV page per token; the batch event carries the last
    ``BLOCK_TABLE_TAIL`` pages and the count, so a decode step's trace at context 300 is as large as at
    context 40 (the whole table made it grow with every token). The tail is the request's newest pages:
    those the step writes."""
    from kda_ref.trace import BLOCK_TABLE_TAIL

    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    ring = LiveTrace(1000)
    llm = LLM(model, tracer=ring, prefix_cache="radix")
    assert llm.pool.sizes.page_size == 1
    ring.attach()
    from kda_ref.server.loop import EngineLoop

    loop = EngineLoop(llm, observers=[ring]).start()
    try:
        list(loop.submit(_prompt(0), SamplingParams(max_tokens=300, ignore_eos=True)))
    finally:
        loop.stop(drain=True)
    records = ring.since(-1)["records"]
    pages, sizes = [], {}
    for rec in records:
        for e in rec["events"]:
            if e["kind"] == "kv_page" and e["op"] == "alloc":
                pages += e["pages"]
            if e["kind"] == "batch_composition" and e["phases"] == ["decode"]:
                assert e["num_pages"] == [len(pages)] and e["block_tables"] == [pages[-BLOCK_TABLE_TAIL:]]
                sizes[e["context_lens"][0]] = len(json.dumps(e))
    assert min(sizes) < 40 and max(sizes) > 290
    assert sizes[max(sizes)] < 1.2 * sizes[40], (sizes[40], sizes[max(sizes)])  # more digits, no more pages


class _CountingRing(LiveTrace):
    """A live trace that counts the events the engine built for it."""

    built = 0

    def emit(self, event) -> None:
        self.built += 1
        super().emit(event)


def test_a_ring_nobody_reads_builds_nothing_and_a_reader_who_comes_back_sees_the_pool_whole(monkeypatch):
    """While no reader is attached the engine builds no events and the ring keeps no records (a server
    nobody watches pays an untraced engine's step); when the reader comes back, the window's base and
    records still rebuild exactly the pool's owners, the cache's pages included, although the steps in
    between were never recorded."""
    from kda_ref.server import live as live_mod
    from kda_ref.server.loop import EngineLoop
    from model_viz.scenarios import engine_trace as et
    from model_viz.scenarios import live

    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    ring = _CountingRing(1000)
    llm = LLM(model, tracer=ring, prefix_cache="radix")
    loop = EngineLoop(llm, observers=[ring]).start()

    def run(ids):
        for s in [loop.submit(_prompt(i), PARAMS) for i in ids]:
            assert [k for k, _ in s][-1] == "done"

    try:
        ring.attach()
        run(range(3))
        window = live.LiveWindow()
        window.add(ring.since(-1))
        assert window.records and ring.built
        monkeypatch.setattr(live_mod, "READER_TTL_S", 0.0)  # the reader left
        run(range(3, 4))  # the loop noticed between steps: the ring paused
        built, step = ring.built, llm.clock.step
        run(range(4, 10))
        assert ring.built == built and llm.clock.step > step and ring.bytes == 0
        assert ring.since(-1)["records"] == []
        monkeypatch.setattr(live_mod, "READER_TTL_S", 10.0)
        ring.attach()  # it came back (since() attached it too)
        run(range(10, 13))
    finally:
        loop.stop(drain=True)
    assert ring.built > built
    window.add(ring.since(window.last_step))
    assert window.missed > 0  # the steps nobody watched
    views = et.engine_steps(window.events())
    want = {k: v for k, v in llm.pool.ownership().items() if v}
    got = {k: dict(views[-1].owners(k)) for k in want}
    assert got == {k: {u: (o if isinstance(o, (int, str)) else str(o)) for u, o in v.items()} for k, v in want.items()}
    assert any(o == "cache" or not isinstance(o, int) for v in got.values() for o in v.values())


def test_a_burst_of_finished_requests_costs_one_cache_picture_and_the_last_one_comes_while_idle():
    """At most one cache snapshot per ``snapshot_every_s``: a burst of finished requests inside it gets one;
    the snapshot of the burst's last request is taken once the interval passed, even if the server idles
    by then (added to the last step's record), so the Live page never keeps showing a stale tree."""
    import time

    from kda_ref.server.loop import EngineLoop

    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    ring = LiveTrace(1000, snapshot_every_s=1.5)
    llm = LLM(model, tracer=ring, prefix_cache="radix")
    loop = EngineLoop(llm, observers=[ring], idle_wait_s=0.02).start()
    try:
        ring.attach()
        for i in range(5):  # one after another: five finishes well inside 1.5 s
            list(loop.submit(_prompt(i), PARAMS))
        snaps = lambda: [r for r in ring.since(-1)["records"] if "cache" in r]  # noqa: E731
        first = snaps()
        deadline = time.monotonic() + 5
        while len(snaps()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        later = snaps()
    finally:
        loop.stop(drain=True)
    assert len(first) == 1 and len(later) == 2
    assert later[-1]["cache"]["snapshot"] != first[0]["cache"]["snapshot"]  # the tree after the fifth
    assert later[-1]["step"] == llm.clock.step  # added to the last step's record: no step ran meanwhile
