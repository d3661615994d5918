"""Deprecated: the old name of :mod:`kda_ref.engine.stopping`
(merged in 2026-12: merged with the stop conditions: the text is where stop strings are found; a decode step now enters fewer files). Importing it warns; it goes in the next release."""

from ..utils.renamed import forward_to

forward_to(__name__, "kda_ref.engine.stopping")
