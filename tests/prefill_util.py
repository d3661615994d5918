"""Shared by the fast-path tests: random byte tokens, and a ``RequestCache`` with prompts prefilled."""

from __future__ import annotations

import torch

from kda_ref.model import RequestCache


def tokens(n, seed=0):
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed))


def prefilled(model, lens, page_size: int = 4) -> RequestCache:
    """A RequestCache whose sequences hold prompts of ``lens`` tokens (sequence s: ``tokens(lens[s], seed=s)``)."""
    cache = RequestCache(model.config, len(lens), max_tokens=max(lens) + 16, page_size=page_size)
    b = cache.batch(lens)
    with torch.no_grad():
        model(torch.cat([tokens(n, seed=s) for s, n in enumerate(lens)]), b, cache.tensors)
    cache.advance(b)
    return cache
