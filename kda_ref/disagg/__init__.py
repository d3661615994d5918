"""``kda_ref.disagg``: prefill/decode disaggregation with KDA state transfer. The entry point is
:class:`DisaggregatedLLM` (its docstring: the handoff, the two modes, the surface).

* :mod:`~kda_ref.disagg.transfer`: the transfer engine's boundary (registered buffers, byte ranges,
  a status), an in-process implementation;
* :mod:`~kda_ref.disagg.handoff`: what crosses (KV, KDA state, conv window at one boundary), the
  manifest and its checks;
* :mod:`~kda_ref.disagg.stream`: KV rows per prefill chunk, the states at the boundary;
* :mod:`~kda_ref.disagg.install`: the decode side's checks, install or recompute;
* :mod:`~kda_ref.disagg.router`: which prefill and decode instance take a request;
* :mod:`~kda_ref.disagg.base`: :class:`DisaggregatedLLM`, the entry point and the interface both modes
  share (``DisaggregatedLLM(..., transfer=)`` builds the mode named), and the errors;
* :mod:`~kda_ref.disagg.llm`: :class:`LocalDisaggregation` (``transfer="local"``): prefill and decode
  engines in process;
* :mod:`~kda_ref.disagg.dist`: :class:`DistDisaggregation` (``transfer="dist"``): the same as worker
  processes over ``torch.distributed``;
* :mod:`~kda_ref.disagg.checks`: :func:`request_checker`, the process mode's request check without an
  engine (the engine's own :class:`~kda_ref.engine.request_check.RequestChecker`, from configurations).
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
