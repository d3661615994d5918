"""PAD rows of a static-shape decode step: index ``-1`` reads zeros and writes nothing.

Article concept ``static.pad_rows`` (``docs/article.md#s0``, the summary table's CUDA-graph row): a
captured decode step has fixed shapes, so a step with ``n`` live requests runs a bucket of ``bs >= n``
rows and the ``bs - n`` tail rows are padding. Their state index is ``PAD_SLOT_ID = -1`` -- SGLang's
``MambaAttnBackendBase._replay_metadata`` (``hybrid_linear_attn_backend.py``) fills
``mamba_indices[bs - num_padding:] = -1``, vLLM's ``GDNAttentionMetadataBuilder`` pads
``non_spec_state_indices`` with ``PAD_SLOT_ID`` -- and every state kernel early-returns on a
negative index. A padded row must never reach a live request's slot: SGLang once set the padded
indices to ``0`` (a real slot) and a padded conv output of uninitialised memory leaked into the
state (SGLang PR #30974 zeroes it).

Torch ops have no per-row early return and a captured graph cannot branch on data, so the torch
path gets the same effect with fixed-shape ops and no host synchronisation:

* :func:`gather_rows` reads a PAD row from the reserved PAD unit ``0`` of the pool (never owned by a
  request: :mod:`kda_ref.memory.pool`) and replaces what it read with zeros;
* :func:`scatter_rows_` writes the live rows and, for a PAD row, stores unit ``0``'s own bytes back
  into unit ``0`` -- so no live slot or page is addressed and the PAD unit keeps its bits (planted
  sentinels survive: ``tests/test_static_decode.py``).

Live indices must be distinct and ``>= 1`` (the engine's pools never hand out unit 0).
"""

from __future__ import annotations

import torch

PAD_SLOT_ID = -1


def _row_mask(valid: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return valid.view(-1, *([1] * (like.dim() - 1)))  # [N] -> [N, 1, ...] broadcast over a row


def gather_rows(pool: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``pool[index]`` (a copy, ``[N, ...]``) with the rows of ``index == PAD_SLOT_ID`` all zeros."""
    valid = index >= 0
    rows = pool.index_select(0, index.clamp_min(0))
    return torch.where(_row_mask(valid, rows), rows, torch.zeros((), dtype=rows.dtype, device=rows.device))


def scatter_rows_(pool: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> None:
    """``pool[index[n]] = rows[n]`` for every live row; a ``PAD_SLOT_ID`` row changes nothing."""
    valid = index >= 0
    safe = index.clamp_min(0)
    rows = rows if rows.dtype == pool.dtype else rows.to(pool.dtype)
    keep = pool.index_select(0, safe)  # a PAD row's value: the PAD unit's own bytes
    pool.index_copy_(0, safe, torch.where(_row_mask(valid, rows), rows, keep))
