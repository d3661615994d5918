"""Prefix caches for hybrid models. :mod:`.radix`: the SGLang-style KDA-aware radix tree (its
wiring into the engine, checkpoint policies and compressed checkpoints are the next step)."""

from .radix import MatchResult, RadixCache, TreeNode

__all__ = ["MatchResult", "RadixCache", "TreeNode"]
