"""``kda_ref.disagg``: prefill/decode disaggregation with KDA state transfer.

* :mod:`~kda_ref.disagg.transfer`: the transfer engine's boundary (registered buffers, byte ranges,
  a status), an in-process implementation;
* :mod:`~kda_ref.disagg.handoff`: what crosses (KV, KDA state, conv window at one boundary), the
  manifest and its checks;
* :mod:`~kda_ref.disagg.llm`: :class:`DisaggregatedLLM`, a prefill and a decode engine.
"""

from .handoff import HandoffError, Manifest, RegionSpec, capture, verify
from .llm import DisaggregatedLLM
from .transfer import LocalTransferEngine, Region, TransferStatus

__all__ = ["DisaggregatedLLM", "HandoffError", "LocalTransferEngine", "Manifest", "Region", "RegionSpec",
           "TransferStatus", "capture", "verify"]
