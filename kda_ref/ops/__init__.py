"""KDA and MLA math: torch references (this package) and Triton kernels (:mod:`kda_ref.ops.triton`).

The public names below follow flash-linear-attention's layouts (see ``_checks.py``).
"""

from .dispatcher import KDAKernelDispatcher, KDAPhase, KernelChoice
from .gate import kda_gate, kda_gate_lowerbound
from .kda_chunk import chunk_kda
from .kda_recurrent import recurrent_kda
from .mla import mla_attention_absorbed, mla_attention_naive
from .norms import l2norm, rms_norm, rms_norm_gated
from .short_conv import causal_conv1d, causal_conv1d_update

__all__ = [
    "KDAKernelDispatcher", "KDAPhase", "KernelChoice", "causal_conv1d", "causal_conv1d_update", "chunk_kda",
    "kda_gate", "kda_gate_lowerbound", "l2norm", "mla_attention_absorbed", "mla_attention_naive",
    "recurrent_kda", "rms_norm", "rms_norm_gated",
]
