"""Deprecated: the old name of :mod:`kda_ref.speculative.draft_model`
(renamed in 2026-12: a newcomer read the old name as another package's). Importing it warns; it goes in the next release."""

from ..utils.renamed import forward_to

forward_to(__name__, "kda_ref.speculative.draft_model")
