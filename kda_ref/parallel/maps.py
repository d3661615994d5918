"""Deprecated: the old name of :mod:`kda_ref.context_parallel.maps`; importing it warns (next release: gone)."""

from ..utils.renamed import forward_to

forward_to(__name__, "kda_ref.context_parallel.maps")
