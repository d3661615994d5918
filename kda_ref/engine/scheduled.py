"""Deprecated: the old name of :mod:`kda_ref.engine.scheduler`
(merged in 2026-12: the scheduler's output lives with the scheduler; a decode step now enters fewer files). Importing it warns; it goes in the next release."""

from ..utils.renamed import forward_to

forward_to(__name__, "kda_ref.engine.scheduler")
