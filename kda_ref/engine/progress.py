"""Deprecated: the old name of :mod:`kda_ref.engine.request_memory`
(merged in 2026-12: merged with the request's memory: the guarantee is about taking it; a decode step now enters fewer files). Importing it warns; it goes in the next release."""

from ..utils.renamed import forward_to

forward_to(__name__, "kda_ref.engine.request_memory")
