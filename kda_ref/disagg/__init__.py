"""``kda_ref.disagg``: prefill/decode disaggregation with KDA state transfer.

* :mod:`~kda_ref.disagg.transfer`: the transfer engine's boundary (registered buffers, byte ranges,
  a status), an in-process implementation;
* :mod:`~kda_ref.disagg.handoff`: what crosses (KV, KDA state, conv window at one boundary), the
  manifest and its checks;
* :mod:`~kda_ref.disagg.stream`: KV rows per prefill chunk, the states at the boundary;
* :mod:`~kda_ref.disagg.install`: the decode side's checks, install or recompute;
* :mod:`~kda_ref.disagg.router`: which prefill and decode instance take a request;
* :mod:`~kda_ref.disagg.base`: :class:`Disaggregation`, the interface both modes share, and the errors;
* :mod:`~kda_ref.disagg.llm`: :func:`DisaggregatedLLM` (builds one mode), :class:`LocalDisaggregation`:
  prefill and decode engines in process;
* :mod:`~kda_ref.disagg.dist`: :class:`DistDisaggregation`: the same as worker processes over
  ``torch.distributed``.
"""

from .handoff import HandoffError, Manifest, RegionSpec, capture, verify
from .base import Disaggregation, DisaggregationError
from .dist import DistDisaggregation
from .llm import DisaggregatedLLM, LocalDisaggregation
from .transfer import LocalTransferEngine, Region, TransferEngine, TransferStatus

__all__ = ["DisaggregatedLLM", "Disaggregation", "DisaggregationError", "DistDisaggregation", "LocalDisaggregation", "HandoffError", "LocalTransferEngine", "Manifest", "Region", "RegionSpec",
           "TransferEngine", "TransferStatus", "capture", "verify"]
