"""SGLang-style prefix cache: the KDA-aware radix tree (:mod:`.tree`) and its request side
(:mod:`.cache`: admission with copy-on-write, checkpoint policies, snapshot, donate)."""

from ...utils.lazy import lazy_exports

# loaded on first use (kda_ref.utils.lazy): importing one module of the package imports no other
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    '.cache': ['BoundaryMismatchError', 'RadixPrefixCache'],
    '.policies': ['CHECKPOINT_POLICIES'],
    '.tree': ['MatchResult', 'RadixTree', 'TreeNode'],
})
