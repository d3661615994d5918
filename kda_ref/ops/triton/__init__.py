"""Triton kernels with the same semantics as the torch references in :mod:`kda_ref.ops`.

Without a GPU they run in Triton's interpreter: ``TRITON_INTERPRET=1`` must be set before this package is
imported (tests/conftest.py and .ci/run do it).

* :func:`chunk_kda` — chunkwise (WY / UT transform) prefill kernel, fla ``fla/ops/kda/chunk.py``.
* :func:`fused_recurrent_kda` — token-by-token decode / verify kernel, fla ``fla/ops/kda/fused_recurrent.py``.
* :func:`paged_mla_decode` — weight-absorbed MLA decode over a paged latent cache.

The KDA kernels also take SGLang's / vLLM's state-pool form (``ssm_state_indices``), in place.
"""

from .kda_chunk import chunk_kda
from .kda_fused_recurrent import fused_recurrent_kda
from .mla_decode import paged_mla_decode

__all__ = ["chunk_kda", "fused_recurrent_kda", "paged_mla_decode"]
