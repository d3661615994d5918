"""``kda_ref.disagg``: prefill/decode disaggregation with KDA state transfer. The entry point is
:class:`DisaggregatedLLM` (``base``, with the errors), whose ``transfer=`` builds a mode:
:class:`LocalDisaggregation` (``llm``: engines in process) or :class:`DistDisaggregation` (``dist``:
worker processes over ``torch.distributed``). The pieces: ``transfer`` (the transfer engine's
boundary), ``handoff`` (what crosses, the manifest and its checks), ``stream`` (KV rows per prefill
chunk, the states at the boundary), ``install`` (the decode side: install or recompute), ``router``
(which instances take a request), ``checks`` (the process mode's request check without an engine).
Design notes: ``docs/disaggregation.md#what-is-built-2026-12-01``.
"""

from .handoff import HandoffError, Manifest, RegionSpec, capture, verify
from .base import DisaggregatedLLM, Disaggregation, DisaggregationError
from ..engine.request_check import RequestChecker
from .checks import request_checker
from .dist import DistDisaggregation
from .llm import LocalDisaggregation
from .transfer import LocalTransferEngine, Region, TransferEngine, TransferStatus

__all__ = ["DisaggregatedLLM", "Disaggregation", "DisaggregationError", "DistDisaggregation", "LocalDisaggregation",
           "HandoffError", "LocalTransferEngine", "Manifest", "Region", "RegionSpec", "RequestChecker", "request_checker",
           "TransferEngine", "TransferStatus", "capture", "verify"]
