"""PAD rows of a static-shape step: index ``-1`` reads zeros and writes nothing live.

Article concept ``static.pad_rows`` (``docs/article.md#s0``, the summary table's CUDA-graph row): the tail
rows of a captured decode bucket carry ``PAD_SLOT_ID = -1``, as in SGLang
``MambaAttnBackendBase._replay_metadata`` (vLLM 0.32.0's ``GDNAttentionMetadataBuilder`` pads with its null
block, ``NULL_BLOCK_ID = 0``, and its KDA kernels skip an index ``<= 0``). The torch path
maps a PAD row to the pool's reserved PAD unit ``0`` (:mod:`kda_ref.memory.pool`, kept zero by
:func:`zero_pad_unit`): :func:`gather_rows` reads zeros there, :func:`scatter_rows_` leaves it zero.
Live indices must be distinct and ``>= 1``.

Design notes: ``docs/kda.md#pad-rows`` and ``docs/spec_decode.md#static-shape-decode``.
"""

from __future__ import annotations

import torch

PAD_SLOT_ID = -1
PAD_UNIT = 0  # the pool's reserved unit a PAD row is redirected to (kda_ref.model.layer_state: PAD_SLOT / PAD_PAGE)


def zero_pad_unit(pool: torch.Tensor, dim: int = 0) -> None:
    """Zero unit 0 of ``pool`` along its unit dimension ``dim``: what a PAD row reads."""
    pool.select(dim, PAD_UNIT).zero_()


def gather_rows(pool: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``pool[index]`` (a copy, ``[N, ...]``); a ``PAD_SLOT_ID`` row reads the zeroed PAD unit.
    Traced by ``torch.compile``, the read goes through the opaque :func:`gather_rows_op`."""
    return gather_rows_op(pool, index) if torch.compiler.is_compiling() else _gather(pool, index)


def _gather(pool: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The read of :func:`gather_rows` (eager and inside its operator)."""
    return pool.index_select(0, index.clamp_min(PAD_UNIT))


# The two operators are registered straight into a ``torch.library.Library`` (schema, one kernel for every
# device, a fake kernel for the tracer) rather than with ``torch.library.custom_op``, whose Python wrapper
# layers cost ~20 us per call here: 14 calls per compiled decode step, ~0.17 ms of a ~0.9 ms batch-1
# step on the 2-core CPU (2026-12-01). vLLM registers its operators the same way and for the same reason
# (``direct_register_custom_op`` in ``vllm/utils/torch_utils.py``, commit ``0024350b``: "custom_op can
# have significant overhead").
_LIB = torch.library.Library("kda_ref", "FRAGMENT")


def _register(name: str, fn, mutates_args: tuple[str, ...], fake):
    """Define ``kda_ref::<name>`` with ``fn``'s schema, ``fn`` as its kernel on every device and ``fake``
    as its meta kernel; returns the operator's default overload (what compiled code calls)."""
    _LIB.define(name + torch.library.infer_schema(fn, mutates_args=mutates_args))
    _LIB.impl(name, fn, "CompositeExplicitAutograd")
    torch.library.register_fake(f"kda_ref::{name}", fake, lib=_LIB)
    return getattr(torch.ops.kda_ref, name).default


def _gather_rows_fake(pool: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return pool.new_empty((index.shape[0], *pool.shape[1:]))


gather_rows_op = _register("gather_rows", _gather, (), _gather_rows_fake)
gather_rows_op.__doc__ = """``kda_ref::gather_rows``: :func:`gather_rows` as one opaque operator, so that a compiled step
reads the pool where the program reads it. Inductor (torch 2.13) otherwise folds a plain
``index_select`` of the pool into the kernel of a later consumer, which it may schedule after
:data:`scatter_rows_op` has written the pool: the short conv then mixed the new window into this
step's output (seen on 2026-12-01: wrong logits from the first compiled step, correct under
``backend="aot_eager"``). An operator's output is a buffer of its own, filled when the operator runs."""


def scatter_rows_(pool: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> None:
    """``pool[index[n]] = rows[n]`` for every live row; what ``PAD_SLOT_ID`` rows write lands in the PAD
    unit, which is zeroed afterwards (so it still reads as zeros; no live unit is touched).

    Traced by ``torch.compile`` (``LLM(torch_compile=True)``), the write goes through the opaque
    custom op :func:`scatter_rows_op` instead: see its docstring for why."""
    if torch.compiler.is_compiling():
        scatter_rows_op(pool, index, rows)
    else:
        _scatter(pool, index, rows)


def write_rows(pool: torch.Tensor, index: torch.Tensor, rows: torch.Tensor, pad: bool) -> None:
    """``pool[index[n]] = rows[n]``: through :func:`scatter_rows_` when ``index`` may hold PAD rows (a static
    step) or under the compiler, else one plain ``index_copy_`` (live, distinct indices)."""
    if pad or torch.compiler.is_compiling():
        scatter_rows_(pool, index, rows)
    else:
        pool.index_copy_(0, index, rows if rows.dtype == pool.dtype else rows.to(pool.dtype))


def _scatter(pool: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> None:
    """The write of :func:`scatter_rows_`: every row to its unit (PAD rows to unit 0), then unit 0 zeroed.
    Cheaper than masking the PAD rows first: a mask costs a pass over all ``N`` rows, the zeroing one unit."""
    pool.index_copy_(0, index.clamp_min(PAD_UNIT), rows if rows.dtype == pool.dtype else rows.to(pool.dtype))
    pool.select(0, PAD_UNIT).zero_()


def _scatter_rows_fake(pool: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> None:
    return None  # writes in place, returns nothing: nothing to describe to the tracer


scatter_rows_op = _register("scatter_rows_", _scatter, ("pool",), _scatter_rows_fake)
scatter_rows_op.__doc__ = """``kda_ref::scatter_rows_``: :func:`scatter_rows_` as one opaque operator whose schema says it
writes ``pool`` (``Tensor(a!) pool``).

Why an operator: a compiler that sees ``pool.index_copy_`` on a graph input -- here a layer's slice of
the engine's whole state or KV pool -- functionalizes it into "copy the pool with these rows replaced,
then copy that back", so a compiled decode step copied every layer's whole pool (measured on the
2-core machine, 2026-12-01: ~36 ms per batch-8 step with the default 64 MiB budget against ~3.3 ms
eager). Declared as an operator that mutates ``pool``, the write stays a single in-place call inside
the compiled step (2.3-2.6 ms). vLLM went further for the same reason: at commit 1d03ed8f its KDA layer
called ``torch.ops.vllm.kda_attention`` (``vllm/model_executor/layers/kda.py``, registered with
``direct_register_custom_op(..., mutates_args=["core_attn_out"])``), which looks the layer's conv and
recurrent caches up from the forward context, so the compiled graph never holds the caches at all (0.32.0
has no such op: ``KimiGatedDeltaNetAttention._forward`` reads ``self.kv_cache`` and runs as an eager break in
its breakable CUDA-graph capture, ``@eager_break_during_capture``); its
KV-cache write is ``unified_kv_cache_update`` (``vllm/model_executor/layers/attention/attention.py``),
likewise opaque."""
