"""``/metrics``: the server's Prometheus text, named as vLLM's server names its metrics with a ``kda_``
prefix for ``vllm:`` (vLLM 0.32.0, ``vllm/v1/metrics/loggers.py``, ``PrometheusStatLogger``; the speculative
counters from ``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingProm``), in a registry of its own (two
servers in one process do not share counters).

Gauges and counters are read from the snapshot the loop's thread publishes after each step
(:meth:`ServerMetrics.after_step`): a scrape never touches the engine. The latency histograms are observed
per request as it ends, from its :class:`~kda_ref.server.loop.StreamTimes`.
Design notes: ``docs/serving.md#4-metrics``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .loop import EngineLoop, StepObserver, Stream

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# seconds; vLLM's TTFT buckets reach 2,560 s for long prompts, here a CPU serves short ones
LATENCY_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5)
# engine counters (LLM.stats()) exported as Prometheus counters: stat -> (metric name, help)
COUNTERS = {
    "prompt_tokens": ("kda_prompt_tokens", "prompt tokens of the requests queued"),
    "generated_tokens": ("kda_generation_tokens", "tokens generated"),
    "cached_prompt_tokens": ("kda_prefix_cache_hits", "prompt tokens taken from the prefix cache"),
    "queried_prompt_tokens": ("kda_prefix_cache_queries", "prompt tokens looked up in the prefix cache"),
    "steps": ("kda_engine_steps", "engine steps run"),
    "spec_draft_tokens": ("kda_spec_decode_num_draft_tokens", "draft tokens proposed"),
    "spec_accepted_tokens": ("kda_spec_decode_num_accepted_tokens", "draft tokens accepted"),
    "preemptions": ("kda_num_preemptions", "requests preempted (their state recomputed later)"),
}


class _EngineCollector:
    """Reads the last published snapshot at scrape time (module docstring)."""

    def __init__(self, metrics: "ServerMetrics"):
        self.metrics = metrics

    def collect(self):
        snap = self.metrics.snapshot
        for key, name, help_ in (("running", "kda_num_requests_running", "requests the engine runs"),
                                 ("waiting", "kda_num_requests_waiting", "requests accepted, not yet running")):
            yield GaugeMetricFamily(name, help_, value=snap.get(key, 0))
        pool = GaugeMetricFamily("kda_pool_used_bytes", "memory pool bytes in use, by page kind", labels=["kind"])
        for kind, used in snap.get("pool_used_bytes", {}).items():
            pool.add_metric([kind], used)
        yield pool
        yield GaugeMetricFamily("kda_pool_budget_bytes", "the memory pool's budget", value=snap.get("budget_bytes", 0))
        stats = snap.get("stats", {})
        for key, (name, help_) in COUNTERS.items():
            yield CounterMetricFamily(name, help_, value=stats.get(key, 0))
        # vLLM's vllm:spec_decode_num_accepted_tokens_per_pos{position} (position 0: the first draft)
        per_pos = CounterMetricFamily("kda_spec_decode_num_accepted_tokens_per_pos", "verifies whose draft at "
                                      "this position (0: the first) was accepted", labels=["position"])
        for i, n in enumerate(stats.get("spec_accepted_per_pos", ())):
            per_pos.add_metric([str(i)], n)
        yield per_pos


def engine_liveness(up: bool, silent_s: float) -> bytes:
    """The metrics the HTTP server's process answers itself, in Prometheus text: ``kda_engine_up`` (1 while
    the engine answers within its heartbeat deadline, 0 when it is unresponsive or gone) and
    ``kda_engine_silent_seconds`` (since it last sent anything). :class:`~kda_ref.server.core_client.RemoteMetrics`
    appends them to the engine's own metrics, and answers with them when the engine does not."""
    return (f"# HELP kda_engine_up 1 while the engine answers within its heartbeat deadline, else 0\n"
            f"# TYPE kda_engine_up gauge\nkda_engine_up {int(up)}\n"
            f"# HELP kda_engine_silent_seconds seconds since the engine process last sent anything\n"
            f"# TYPE kda_engine_silent_seconds gauge\nkda_engine_silent_seconds {silent_s:.3f}\n").encode()


class ServerMetrics(StepObserver):
    """The server's metrics: a :class:`~kda_ref.server.loop.StepObserver` of its engine loop."""

    def __init__(self, model_name: str):
        self.model_name = model_name
        self.registry = CollectorRegistry()
        self.snapshot: dict = {}  # replaced whole by the loop's thread; scrapes read it
        r = self.registry
        self.ttft = Histogram("kda_time_to_first_token_seconds", "time to first token", buckets=LATENCY_BUCKETS,
                              registry=r)
        self.tpot = Histogram("kda_request_time_per_output_token_seconds", "mean time per output token after the "
                              "first, per request", buckets=TOKEN_BUCKETS, registry=r)
        self.itl = Histogram("kda_inter_token_latency_seconds", "time between a request's successive steps that "
                             "gave it tokens", buckets=TOKEN_BUCKETS, registry=r)
        self.e2e = Histogram("kda_e2e_request_latency_seconds", "submit to last token", buckets=LATENCY_BUCKETS,
                             registry=r)
        self.finished = Counter("kda_request_success", "requests ended, by finish reason", ["finished_reason"],
                                registry=r)
        self.refused = Counter("kda_request_refused", "requests refused at admission (503)", registry=r)
        r.register(_EngineCollector(self))

    def after_step(self, loop: EngineLoop, ended: list[Stream], stepped: bool) -> None:
        llm, stats = loop.llm, loop.step_stats
        self.snapshot = {"running": llm.num_running, "waiting": llm.num_waiting + loop.inbox_size(),
                         "pool_used_bytes": stats["pool_used_bytes"], "budget_bytes": stats["budget_bytes"],
                         "stats": {**{k: stats.get(k, 0) for k in COUNTERS},
                                   "queried_prompt_tokens": stats["prompt_tokens"] if llm.prefix_cache.enabled else 0,
                                   "spec_accepted_per_pos": tuple(stats.get("spec_accepted_per_pos", ()))}}
        for s in ended:
            self.observe(s)

    def observe(self, s: Stream) -> None:
        """One ended request: its latencies (only those it has) and its finish reason."""
        t, reason = s.times, s.finish_reason
        self.finished.labels(finished_reason=reason).inc()
        if reason not in ("stop", "length"):  # a client that left or a failure: no latency to report
            return
        for hist, value in ((self.ttft, t.ttft), (self.tpot, t.tpot), (self.e2e, t.e2e)):
            if value is not None:
                hist.observe(value)
        for gap in t.itl():
            self.itl.observe(gap)

    def render(self) -> bytes:
        return generate_latest(self.registry)
