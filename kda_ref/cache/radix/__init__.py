"""SGLang-style prefix cache: the KDA-aware radix tree (:mod:`.tree`) and its request side
(:mod:`.cache`: admission with copy-on-write, checkpoint policies, snapshot, donate)."""

from .cache import BoundaryMismatchError, RadixPrefixCache
from .policies import CHECKPOINT_POLICIES
from .tree import MatchResult, RadixTree, TreeNode

__all__ = ["BoundaryMismatchError", "CHECKPOINT_POLICIES", "MatchResult", "RadixPrefixCache", "RadixTree", "TreeNode"]
