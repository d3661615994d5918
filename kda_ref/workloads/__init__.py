"""Deterministic, seeded synthetic workloads for prefix-cache experiments on hybrid KDA + MLA models.

    from kda_ref.workloads import make, save, load
    w = make("multi_turn", seed=0, scale="tiny")     # or scale="large", num_requests=10_000
    w.stats()["shared_prefix_tokens"]                # ideal reuse with an infinite cache
    save(w, "mt.jsonl"); assert load("mt.jsonl") == w

Families (:data:`FAMILIES`): ``shared_system_prompt``, ``multi_turn``, ``tree_search``, ``few_shot``,
``long_document_qa`` -- the prefix-sharing shapes of Marconi's traces and of ``docs/article.md#s9``.
Design notes: ``docs/workloads.md``
"""

from .core import (Workload, WorkloadError, WorkloadRequest, WorkloadTypeError, load, save,
                   shared_prefix_tokens)
from .families import FAMILIES, defaults, make, parameters

__all__ = ["FAMILIES", "Workload", "WorkloadError", "WorkloadRequest", "WorkloadTypeError",
           "defaults", "load", "make", "parameters", "save", "shared_prefix_tokens"]
