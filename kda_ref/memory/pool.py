"""``UnifiedMemoryPool``: one byte budget shared by the page kinds of a hybrid model.

Article concepts ``memory.page_kind`` and ``memory.unified_pool`` (``docs/article.md#s4-1``, ``#s5-5``): MLA KV
pages (``PageKind.MLA_KV``), active KDA states (``PageKind.KDA_STATE``) and saved states (``PageKind.CHECKPOINT``,
in the state slots: donating is a re-tag). Per-kind accounting under one byte budget, over per-kind tensors
``[layers, units, ...]`` that the kernels index directly; unit 0 of every kind is a reserved PAD unit; every
allocated unit has an owner (:meth:`ownership`, what the visualizer draws). Counterparts: SGLang's ``MambaPool``
+ ``HybridLinearKVPool`` and ``unified_memory_pool.py::UnifiedKVPool``; vLLM's ``_align_hybrid_block_size``.
Design notes: ``docs/architecture.md#the-memory-pool``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

from ..model.layer_state import HybridCacheTensors
from ..model.config import ModelConfig
from ..model.size import cache_unit_bytes
from .checkpoint_store import CheckpointCodec, CompressedCheckpoints
from .codecs import checkpoint_codec


class PageKind(str, Enum):
    MLA_KV = "mla_kv"
    KDA_STATE = "kda_state"
    CHECKPOINT = "checkpoint"


class PoolExhausted(RuntimeError):
    """Not enough budget left for the requested units (the pool is left unchanged)."""


@dataclass(frozen=True)
class UnitSizes:
    page_size: int
    kv_page_bytes: int  # one MLA page: page_size tokens x all MLA layers
    state_bytes: int  # one KDA state: recurrent + conv, all KDA layers
    checkpoint_bytes: int = 0  # one checkpoint (= state_bytes unless compressed)

    def of(self, kind: PageKind) -> int:
        kind = PageKind(kind)
        if kind is PageKind.MLA_KV:
            return self.kv_page_bytes
        if kind is PageKind.CHECKPOINT:
            return self.checkpoint_bytes or self.state_bytes
        return self.state_bytes


def unit_sizes(config: ModelConfig, page_size: int, dtype: torch.dtype = torch.float32) -> UnitSizes:
    state, page = cache_unit_bytes(config, page_size, torch.empty((), dtype=dtype).element_size())
    return UnitSizes(page_size=page_size, kv_page_bytes=page, state_bytes=state)


def _sizes(config: ModelConfig, page_size: int, dtype: torch.dtype, codec: CheckpointCodec) -> UnitSizes:
    """:func:`unit_sizes` with one checkpoint's bytes as ``codec`` stores it (a state slot's for fp32)."""
    sizes = unit_sizes(config, page_size, dtype)
    return UnitSizes(sizes.page_size, sizes.kv_page_bytes, sizes.state_bytes, codec.checkpoint_bytes(config, dtype))


class _FreeList:
    """Unit ids ``1 .. capacity-1`` handed out lowest-first, freed ids reused first (LIFO).

    Fresh ids come from a high-water mark, so a pool sized for millions of units (the simulator's
    48B budgets) costs nothing until they are used."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.next_fresh = 1  # id 0 is the PAD unit
        self.recycled: list[int] = []

    def __len__(self) -> int:
        return len(self.recycled) + self.capacity - self.next_fresh

    def pop(self) -> int:
        if self.recycled:
            return self.recycled.pop()
        if self.next_fresh >= self.capacity:
            raise IndexError("free list empty")
        self.next_fresh += 1
        return self.next_fresh - 1

    def append(self, i: int) -> None:
        self.recycled.append(i)


class PoolAccounting:
    """The bookkeeping half of the pool: byte budget, per-kind free lists, owners, used and peak
    bytes, retag. :class:`VirtualPool` is this accounting at a model's sizes with no tensors, for the
    cost-model simulator (``kda_ref.sim``) that drives the prefix caches at the 48B model's sizes without
    running the model; :class:`UnifiedMemoryPool` adds the tensors."""

    def __init__(self, sizes: UnitSizes, budget_bytes: int, shared_checkpoint_slots: bool):
        if not isinstance(budget_bytes, int) or budget_bytes <= 0:
            raise ValueError(f"budget_bytes: must be a positive int, got {budget_bytes!r}")
        self.sizes = sizes
        self.budget_bytes = budget_bytes
        minimum = sizes.state_bytes + sizes.kv_page_bytes
        if budget_bytes < minimum:
            raise ValueError(f"budget_bytes: {budget_bytes} B cannot hold even one request "
                             f"(one KDA state {sizes.state_bytes} B + one KV page {sizes.kv_page_bytes} B)")
        # +1 for the PAD unit 0 of each kind
        self.max_pages = budget_bytes // sizes.kv_page_bytes + 1
        self.max_slots = budget_bytes // sizes.state_bytes + 1
        self.max_checkpoints = self.max_slots if shared_checkpoint_slots else budget_bytes // sizes.of(PageKind.CHECKPOINT) + 1
        state_free = _FreeList(self.max_slots)
        # fp32 checkpoints are ordinary state slots (donating is a re-tag); compressed ones have their own
        ckpt_free = state_free if shared_checkpoint_slots else _FreeList(self.max_checkpoints)
        self._free = {PageKind.MLA_KV: _FreeList(self.max_pages), PageKind.KDA_STATE: state_free,
                      PageKind.CHECKPOINT: ckpt_free}
        self._owner: dict[PageKind, dict[int, object]] = {k: {} for k in PageKind}
        # the owners changed since the trace last read them (take_changes); None until a trace asks
        self._changes: dict[PageKind, dict[int, object]] | None = None
        self.used_bytes = {k: 0 for k in PageKind}
        self.peak_bytes = {k: 0 for k in PageKind}
        self.peak_total_bytes = 0
        self.shared_checkpoint_slots = shared_checkpoint_slots

    # ---- accounting --------------------------------------------------------------------------
    @property
    def total_used_bytes(self) -> int:
        return sum(self.used_bytes.values())

    @property
    def free_bytes(self) -> int:
        return self.budget_bytes - self.total_used_bytes

    def can_alloc(self, kind: PageKind, n: int) -> bool:
        return n <= len(self._free[kind]) and n * self.sizes.of(kind) <= self.free_bytes

    def ownership(self) -> dict[str, dict[int, object]]:
        """``{kind: {unit id: owner}}`` for every allocated unit."""
        return {k.value: dict(v) for k, v in self._owner.items()}

    def take_changes(self) -> dict[str, dict[int, object]] | None:
        """The units whose owner changed since the previous call, ``{kind: {unit: owner, or None when
        freed}}``; None on the first call, which starts the log (the caller reads :meth:`ownership` whole
        once). The step trace calls it after every traced step (``kda_ref.engine.step_trace``), so a
        step's pool snapshot costs what the step changed, not what the pool (and the prefix cache in it)
        holds; an untraced engine never starts the log."""
        out = None if self._changes is None else {k.value: v for k, v in self._changes.items() if v}
        self._changes = {k: {} for k in PageKind}
        return out

    def _note(self, kind: PageKind, i: int, owner: object) -> None:
        if self._changes is not None:
            self._changes[kind][i] = owner

    @property
    def donates_by_retag(self) -> bool:
        """True when a finished request's active slot can become a checkpoint without a copy."""
        return self.shared_checkpoint_slots

    def is_empty(self) -> bool:
        """True when nothing is allocated: every unit is back and every kind's bytes are zero (not only their
        total, which two drifted kinds could bring to zero)."""
        return not any(self.used_bytes.values()) and not any(self._owner.values())

    # ---- alloc / free / retag ----------------------------------------------------------------
    def alloc(self, kind: PageKind, n: int, owner: object) -> list[int]:
        """Allocate ``n`` units of ``kind`` for ``owner``; raises :class:`PoolExhausted` (and changes
        nothing) when the budget or the kind's units run out. State and checkpoint slots are zeroed."""
        kind = PageKind(kind)
        if n < 0:
            raise ValueError(f"n: must be >= 0, got {n}")
        if not self.can_alloc(kind, n):
            raise PoolExhausted(f"{kind.value}: cannot allocate {n} unit(s) of {self.sizes.of(kind)} B; "
                                f"{self.free_bytes} B of {self.budget_bytes} B free")
        ids = [self._free[kind].pop() for _ in range(n)]
        for i in ids:
            self._owner[kind][i] = owner
            self._note(kind, i, owner)
        self.used_bytes[kind] += n * self.sizes.of(kind)
        self.peak_bytes[kind] = max(self.peak_bytes[kind], self.used_bytes[kind])
        self.peak_total_bytes = max(self.peak_total_bytes, self.total_used_bytes)
        if ids:
            self._zero(kind, ids)
        return ids

    def _zero(self, kind: PageKind, ids: list[int]) -> None:
        """Fresh state and checkpoint slots start from zeros (no data in the accounting-only pool)."""

    def owner_of(self, kind: PageKind, i: int) -> object | None:
        """Who holds unit ``i`` of ``kind`` (None when it is free)."""
        return self._owner[PageKind(kind)].get(i)

    def free(self, kind: PageKind, ids: list[int]) -> None:
        """Return units to the pool. Freeing a unit that is not allocated is an error (no double free)."""
        kind = PageKind(kind)
        for i in ids:
            if i not in self._owner[kind]:
                raise ValueError(f"ids: {kind.value} unit {i} is not allocated")
        if len(set(ids)) != len(ids):
            raise ValueError(f"ids: duplicates in {ids}")
        for i in ids:
            del self._owner[kind][i]
            self._free[kind].append(i)
            self._note(kind, i, None)
        self.used_bytes[kind] -= len(ids) * self.sizes.of(kind)

    def retag(self, kind: PageKind, ids: list[int], owner: object, new_kind: PageKind | None = None) -> None:
        """Hand allocated units to another ``owner`` (and, for state slots, another kind) without
        copying: a request donating its KV or its finished state to the prefix cache."""
        kind, new_kind = PageKind(kind), PageKind(new_kind or kind)
        if (kind is PageKind.MLA_KV) != (new_kind is PageKind.MLA_KV) or (
                kind is not new_kind and not self.shared_checkpoint_slots):
            raise ValueError(f"new_kind: cannot turn {kind.value} units into {new_kind.value}")
        for i in ids:
            if i not in self._owner[kind]:
                raise ValueError(f"ids: {kind.value} unit {i} is not allocated")
        if len(set(ids)) != len(ids):  # checked before anything moves, as free() does
            raise ValueError(f"ids: duplicates in {ids}")
        for i in ids:
            del self._owner[kind][i]
            self._owner[new_kind][i] = owner
            if new_kind is not kind:
                self._note(kind, i, None)
            self._note(new_kind, i, owner)
        moved = len(ids) * self.sizes.of(kind)
        self.used_bytes[kind] -= moved
        self.used_bytes[new_kind] += moved
        self.peak_bytes[new_kind] = max(self.peak_bytes[new_kind], self.used_bytes[new_kind])

    def _need(self, kind: PageKind, i: int) -> None:
        if i not in self._owner[kind]:
            raise ValueError(f"slot: {kind.value} unit {i} is not allocated")

    # ---- state copies (checked here, performed by the tensor pool) -----------------------------
    def copy_state(self, src: int, dst: int, src_kind: PageKind = PageKind.KDA_STATE,
                   dst_kind: PageKind = PageKind.KDA_STATE) -> None:
        """Copy one state (recurrent + conv, all KDA layers) between slots, across kinds if asked:
        a checkpoint restore is ``CHECKPOINT -> KDA_STATE`` (copy-on-write), a snapshot the reverse
        (SGLang ``MambaPool.copy_from``)."""
        for kind, i in ((src_kind, src), (dst_kind, dst)):
            if kind is PageKind.MLA_KV or i not in self._owner[kind]:
                raise ValueError(f"slot: {kind.value} unit {i} is not an allocated state slot")

    def checkpoint_from_active(self, active: int, ckpt: int) -> None:
        """Snapshot: active state slot -> checkpoint slot (compressed if the pool compresses)."""
        self._need(PageKind.KDA_STATE, active)
        self._need(PageKind.CHECKPOINT, ckpt)

    def write_checkpoint(self, ckpt: int, recurrent, conv) -> None:
        """Store ``recurrent [L, H, K, V]`` and ``conv [L, 3D, W-1]`` (e.g. chunk-start states)."""
        self._need(PageKind.CHECKPOINT, ckpt)

    def restore_checkpoint(self, ckpt: int, active: int) -> None:
        """Copy-on-write restore: checkpoint -> a fresh active slot (dequantized if compressed)."""
        self._need(PageKind.CHECKPOINT, ckpt)
        self._need(PageKind.KDA_STATE, active)



class VirtualPool(PoolAccounting):
    """Accounting only, at any model's sizes: what the prefix caches allocate, free and retag, with
    no tensors behind the ids (the cost-model simulator's pool)."""

    def __init__(self, config: ModelConfig, budget_bytes: int, page_size: int = 16,
                 dtype: torch.dtype = torch.bfloat16, checkpoint_dtype: str | CheckpointCodec = "fp32"):
        if not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size: must be a positive int, got {page_size!r}")
        self.config = config
        self.codec = codec = checkpoint_codec(checkpoint_dtype)  # ValueError naming checkpoint_dtype
        self.checkpoint_dtype = codec.name
        super().__init__(_sizes(config, page_size, dtype, codec), budget_bytes,
                         shared_checkpoint_slots=codec.shares_state_slots)


class UnifiedMemoryPool(VirtualPool):
    """Byte-budgeted pool of MLA KV pages, KDA state slots and checkpoint slots: the accounting of a
    :class:`VirtualPool` with the tensors behind the ids.

    ``tensors`` holds the KV pages and the state slots (active and checkpoint) the model reads and
    writes.
    """

    def __init__(self, config: ModelConfig, budget_bytes: int, page_size: int = 16,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
                 checkpoint_dtype: str | CheckpointCodec = "fp32"):
        super().__init__(config, budget_bytes, page_size, dtype, checkpoint_dtype)
        self.tensors = HybridCacheTensors.reserve(config, self.max_slots, self.max_pages, page_size, dtype=dtype,
                                                  device=device)
        # exact checkpoints are state slots of ``tensors``; a compressing codec stores them apart
        self.compressed = None if self.codec.shares_state_slots else CompressedCheckpoints(
            config, self.max_checkpoints, self.codec, dtype, device)

    def _zero(self, kind: PageKind, ids: list[int]) -> None:
        if kind is PageKind.KDA_STATE or (kind is PageKind.CHECKPOINT and self.compressed is None):
            idx = torch.tensor(ids, device=self.tensors.recurrent.device)
            self.tensors.recurrent[:, idx] = 0
            self.tensors.conv[:, idx] = 0

    def copy_state(self, src: int, dst: int, src_kind: PageKind = PageKind.KDA_STATE,
                   dst_kind: PageKind = PageKind.KDA_STATE) -> None:
        super().copy_state(src, dst, src_kind, dst_kind)
        t = self.tensors
        t.recurrent[:, dst] = t.recurrent[:, src]
        t.conv[:, dst] = t.conv[:, src]

    # ---- checkpoints (exact or compressed) ------------------------------------------------------
    def checkpoint_from_active(self, active: int, ckpt: int) -> None:
        if self.compressed is None:
            self.copy_state(active, ckpt, PageKind.KDA_STATE, PageKind.CHECKPOINT)
        else:
            super().checkpoint_from_active(active, ckpt)
            self.compressed.store(ckpt, self.tensors.recurrent[:, active], self.tensors.conv[:, active])

    def write_active(self, slot: int, recurrent: torch.Tensor, conv: torch.Tensor) -> None:
        """Set an active state slot to ``recurrent [L, H, K, V]`` and ``conv [L, 3D, W-1]``: the
        speculative commit, the state after the last accepted draft token (SGLang's post-verify
        copy of ``intermediate_ssm`` / ``intermediate_conv_window`` into the request's slot)."""
        self._need(PageKind.KDA_STATE, slot)
        self.tensors.recurrent[:, slot] = recurrent
        self.tensors.conv[:, slot] = conv.to(self.tensors.conv.dtype)

    def write_active_layers(self, slot: int, states) -> None:
        """:meth:`write_active` from one ``(recurrent [H, K, V], conv [3D, W-1])`` pair per KDA layer, in
        the pools' layer order: one in-place copy per layer and pool, nothing stacked first (the
        per-step speculative commit, :meth:`kda_ref.speculative.PerStepStates.commit`)."""
        self._need(PageKind.KDA_STATE, slot)
        t = self.tensors
        for li, (recurrent, conv) in enumerate(states):
            t.recurrent[li, slot].copy_(recurrent)
            t.conv[li, slot].copy_(conv)

    def write_actives(self, slots: list[int], recurrent: torch.Tensor, conv: torch.Tensor) -> None:
        """:meth:`write_active` for several slots in one write per pool: ``recurrent [n, L, H, K, V]``,
        ``conv [n, L, 3D, W-1]`` go to ``slots[0 .. n-1]`` (``spec_state="slots"``: the state after
        every verified token into that token's slot)."""
        for slot in slots:
            self._need(PageKind.KDA_STATE, slot)
        idx = torch.tensor(slots, dtype=torch.long, device=self.tensors.recurrent.device)
        self.tensors.recurrent[:, idx] = recurrent.transpose(0, 1)
        self.tensors.conv[:, idx] = conv.transpose(0, 1).to(self.tensors.conv.dtype)

    def write_checkpoint(self, ckpt: int, recurrent: torch.Tensor, conv: torch.Tensor) -> None:
        super().write_checkpoint(ckpt, recurrent, conv)
        if self.compressed is None:
            self.tensors.recurrent[:, ckpt] = recurrent
            self.tensors.conv[:, ckpt] = conv.to(self.tensors.conv.dtype)
        else:
            self.compressed.store(ckpt, recurrent, conv)

    def restore_checkpoint(self, ckpt: int, active: int) -> None:
        if self.compressed is None:
            self.copy_state(ckpt, active, PageKind.CHECKPOINT, PageKind.KDA_STATE)
        else:
            super().restore_checkpoint(ckpt, active)
            rec, conv = self.compressed.load(ckpt)
            self.tensors.recurrent[:, active] = rec
            self.tensors.conv[:, active] = conv
