"""PAD rows of a static-shape step: index ``-1`` reads zeros and writes nothing live.

Article concept ``static.pad_rows`` (``docs/article.md#s0``, the summary table's CUDA-graph row): a
captured decode step has fixed shapes, so a step with ``n`` live requests runs a bucket of ``bs >= n``
rows and the ``bs - n`` tail rows are padding. Their state index is ``PAD_SLOT_ID = -1`` -- SGLang's
``MambaAttnBackendBase._replay_metadata`` (``hybrid_linear_attn_backend.py``) fills
``mamba_indices[bs - num_padding:] = -1``, vLLM's ``GDNAttentionMetadataBuilder.build`` pads
``non_spec_state_indices_tensor`` with ``PAD_SLOT_ID`` -- and every state kernel returns early on a
negative index. A padded row must never reach a live request's slot; and a padded row's output must
not be left uninitialised (SGLang PR #30974 zeroes the padded conv outputs).

Torch ops have no per-row early return and a captured graph cannot branch on data, so the torch
path maps a PAD row to the pool's reserved PAD unit ``0`` -- never handed to a request
(:mod:`kda_ref.memory.pool`) and kept all zeros by a static step (:func:`zero_pad_unit`):

* :func:`gather_rows` reads a PAD row from unit 0: zeros;
* :func:`scatter_rows_` writes the live rows to their units and zeros to unit 0.

No live unit is ever addressed by a PAD row, with fixed shapes and no host synchronisation
(``tests/test_static_decode.py`` plants NaN in every unit no live request owns and checks them bit
for bit after padded steps, and unit 0 for zeros). Live indices must be distinct and ``>= 1``.
"""

from __future__ import annotations

import torch

PAD_SLOT_ID = -1
PAD_UNIT = 0  # the pool's reserved unit a PAD row is redirected to (kda_ref.model.cache: PAD_SLOT / PAD_PAGE)


def zero_pad_unit(pool: torch.Tensor, dim: int = 0) -> None:
    """Zero unit 0 of ``pool`` along its unit dimension ``dim``: what a PAD row reads."""
    pool.select(dim, PAD_UNIT).zero_()


def gather_rows(pool: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``pool[index]`` (a copy, ``[N, ...]``); a ``PAD_SLOT_ID`` row reads the zeroed PAD unit."""
    return pool.index_select(0, index.clamp_min(PAD_UNIT))


def scatter_rows_(pool: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> None:
    """``pool[index[n]] = rows[n]`` for every live row; a ``PAD_SLOT_ID`` row writes zeros to the PAD
    unit (every PAD row the same zeros, so their order does not matter). ``rows`` is modified."""
    rows = rows if rows.dtype == pool.dtype else rows.to(pool.dtype)
    pad = (index < 0).view(-1, *([1] * (rows.dim() - 1)))  # [N] -> [N, 1, ...]
    pool.index_copy_(0, index.clamp_min(PAD_UNIT), rows.masked_fill_(pad, 0.0))
