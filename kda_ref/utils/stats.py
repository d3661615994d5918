"""Percentiles as the serving benchmarks report them (torch-free)."""

from __future__ import annotations

import math


def nearest_rank(values, q: float) -> float | None:
    """The ``q``-th percentile of ``values`` by the nearest-rank rule (the smallest value with at least ``q``
    percent of them at or below it; vLLM's serving benchmark interpolates instead, ``np.percentile``); ``None``
    for no values.
    The load generator (:mod:`kda_ref.server.load`) and the cache simulator (:mod:`kda_ref.sim`) use it."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]
