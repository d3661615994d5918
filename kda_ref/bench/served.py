"""What both serve benchmarks share (:mod:`.serve` under Poisson load, :mod:`.serve_fill` filling each
pool): the prefix caches a server is started with, the model names ``--model`` maps to ``kda-ref serve``'s,
and the ``/metrics`` scrape."""

from __future__ import annotations

import re
import urllib.request

CACHES = {"none": {}, "radix": {"prefix_cache": "radix"},
          "block": {"prefix_cache": "block", "block_size": 64, "hash_unit": 16, "mamba_cache_mode": "all"}}
SERVED = {"trained": "trained", "trained-k3": "trained-k3", "micro": "random-micro"}  # --model: kda-ref serve's MODEL


def scrape(url: str) -> dict[str, float]:
    """The server's ``/metrics`` as ``{name{labels}: value}`` (``/metrics`` needs no API key)."""
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(\S+) (\S+)$", text, re.M)}
