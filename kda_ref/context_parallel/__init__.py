"""``kda_ref.context_parallel``: context-parallel KDA prefill by prefix scan (KCP) on ``torch.distributed``.

Article concept ``cp.prefix_scan`` (``docs/article.md#s0``): a long prompt split over ranks; attention
KV can be gathered, but a KDA state cannot be added across segments -- each segment is an affine map
of its incoming state, and the incoming states are a prefix scan of the ranks' maps.

Modules: ``maps`` (the maps ``(A, B)``, their composition, the scan), ``comm`` (the all-gathers, byte
counts, timeouts), ``forward`` (one rank's share of the prefill), ``launch``
(:func:`context_parallel_prefill`, ``R`` real processes). Design notes: ``docs/context_parallel.md``.
"""

from ..utils.lazy import lazy_exports

# loaded on first use (kda_ref.utils.lazy): importing one module of the package imports no other
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    '.comm': ['CollectiveError', 'DistGroup', 'ThreadGroup'],
    '.forward': ['CPLayout', 'PrefixState', 'RankOutput', 'rank_forward'],
    '.launch': ['ContextParallelError', 'ContextParallelFallback', 'CPResult', 'context_parallel_prefill'],
    '.maps': ['apply_map', 'chunk_maps', 'compose', 'exclusive_scan', 'identity_map', 'pack', 'segment_map',
              'segment_map_reference', 'unpack'],
})
