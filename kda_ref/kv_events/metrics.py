"""One metrics snapshot from any of the three servers' Prometheus ``/metrics``, in one vocabulary.

Names from vLLM 0.32.0's ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``), SGLang 0.5.23's
``sglang/srt/observability/metrics_collector.py`` and this server's :mod:`kda_ref.server.metrics`. Counts are summed over
label sets (a vLLM server labels by ``model_name`` and ``engine``). A metric the server does not export is
None, never 0.

Design notes (the table of names per engine):
``docs/serving.md#5b-kv-events-the-prefix-cache-on-vllms-wire-and-kda-ref-watch``.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

ENGINES = {"vllm": "vllm:", "sglang": "sglang:", "kda-ref": "kda_"}
NAMES = {
    "vllm": {"running": "num_requests_running", "waiting": "num_requests_waiting", "kv_usage": "kv_cache_usage_perc",
             "queries": "prefix_cache_queries", "hits": "prefix_cache_hits", "preemptions": "num_preemptions",
             "accepted_per_pos": "spec_decode_num_accepted_tokens_per_pos"},
    "sglang": {"running": "num_running_reqs", "waiting": "num_queue_reqs", "kv_usage": "token_usage",
               "queries": "prompt_tokens", "hits": "cached_tokens", "preemptions": "num_retracted_requests"},
    "kda-ref": {"running": "num_requests_running", "waiting": "num_requests_waiting", "queries": "prefix_cache_queries",
                "hits": "prefix_cache_hits", "preemptions": "num_preemptions",
                "accepted_per_pos": "spec_decode_num_accepted_tokens_per_pos"},
}


def samples(text: str) -> dict[str, list[tuple[dict, float]]]:
    """Every sample of a Prometheus text, by its name (counters keep their ``_total``)."""
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def engine_of(names) -> str | None:
    """Which server wrote metrics with these names (the prefix that names its running requests)."""
    for engine, prefix in ENGINES.items():
        if any(n.startswith(prefix) and n.endswith(NAMES[engine]["running"]) for n in names):
            return engine
    return None


def _value(found: dict, prefix: str, name: str | None) -> float | None:
    if name is None:
        return None
    for full in (prefix + name, prefix + name + "_total"):
        if full in found:
            return sum(v for _, v in found[full])
    return None


def snapshot(text: str) -> dict:
    """``{"engine", "running", "waiting", "kv_usage", "prefix_cache": {"queries", "hits"}, "preemptions",
    "accepted_per_pos"}`` from one ``/metrics`` answer (module docstring)."""
    found = samples(text)
    engine = engine_of(found)
    if engine is None:
        return {"engine": None}
    prefix, names = ENGINES[engine], NAMES[engine]
    v = {k: _value(found, prefix, names.get(k)) for k in ("running", "waiting", "kv_usage", "queries", "hits",
                                                          "preemptions")}
    if engine == "kda-ref":
        used, budget = _value(found, prefix, "pool_used_bytes"), _value(found, prefix, "pool_budget_bytes")
        v["kv_usage"] = used / budget if used is not None and budget else None
    per_pos = {}
    for labels, value in found.get(prefix + names.get("accepted_per_pos", "?") + "_total", []):
        per_pos[int(labels.get("position", 0))] = per_pos.get(int(labels.get("position", 0)), 0) + value
    return {"engine": engine, "running": v["running"], "waiting": v["waiting"], "kv_usage": v["kv_usage"],
            "prefix_cache": {"queries": v["queries"], "hits": v["hits"]}, "preemptions": v["preemptions"],
            "accepted_per_pos": [per_pos[k] for k in sorted(per_pos)]}
