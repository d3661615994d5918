"""Deprecated: the old name of :mod:`kda_ref.model.parts`
(merged in 2026-12: the fused weights live with the parts they are built from; a decode step now enters fewer files). Importing it warns; it goes in the next release."""

from ..utils.renamed import forward_to

forward_to(__name__, "kda_ref.model.parts")
