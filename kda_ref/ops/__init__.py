"""KDA and MLA math: torch references (this package) and Triton kernels (:mod:`kda_ref.ops.triton`).

The public names below follow flash-linear-attention's layouts (see ``_checks.py``).
"""

from ..utils.lazy import lazy_exports

# loaded on first use (kda_ref.utils.lazy): importing one module of the package imports no other
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    '.dispatcher': ['KDAKernelDispatcher', 'KDAPhase', 'KernelChoice'],
    '.gate': ['kda_gate', 'kda_gate_lowerbound'],
    '.kda_chunk': ['chunk_kda'],
    '.kda_recurrent': ['recurrent_kda'],
    '.mla': ['mla_attention_absorbed', 'mla_attention_naive'],
    '.norms': ['l2norm', 'rms_norm', 'rms_norm_gated'],
    '.short_conv': ['causal_conv1d', 'causal_conv1d_update'],
})
