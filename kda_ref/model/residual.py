"""Deprecated: the old name of :mod:`kda_ref.model.decoder`
(merged in 2026-12: the residual stream lives with the decoder layer that reads it; a decode step now enters fewer files). Importing it warns; it goes in the next release."""

from ..utils.renamed import forward_to

forward_to(__name__, "kda_ref.model.decoder")
