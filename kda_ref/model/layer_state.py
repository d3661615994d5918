"""Cache storage for the hybrid model, and a simple per-request cache for decoding without the engine.

Article concept ``state.three_kinds`` (``docs/article.md#s1-2``, ``#s4-1``): per MLA layer paged latent KV
rows (``kv[layer, page, slot]``); per KDA layer a float32 recurrent state ``[HV, K, V]`` and a short-conv
window ``[3 * H * D, W - 1]``. :class:`HybridCacheTensors` is the raw storage, shaped as SGLang's
``MambaPool`` and MLA token pool (the state in fla's default ``[K, V]`` order; SGLang's KDA kernels and
vLLM 0.32.0's K3 kernels keep ``[V, K]``: ``docs/kda.md``, "The state layout") (allocation policy lives in the
engine's memory pool; slot 0 and page 0 are PAD). :class:`RequestCache` gives a few sequences fixed slots and
pages for decoding with :meth:`kda_ref.model.HybridModel.forward` and no engine. Design notes:
``docs/model.md#cache-storage``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ops.pad_rows import zero_pad_unit
from .batch import ForwardBatch
from .config import ModelConfig
from ..utils import cdiv

PAD_SLOT = 0
PAD_PAGE = 0


@dataclass
class BoundaryState:
    """A request's cached state at a token boundary ``b``: every KDA layer's recurrent state and conv
    window after token ``b - 1`` and every MLA layer's latent rows of tokens ``[start, b)``. The three
    describe the same boundary (article concept ``boundary.consistency``, ``docs/article.md#s4-2``);
    :meth:`HybridCacheTensors.read_boundary` and :meth:`HybridCacheTensors.install_boundary` are the one
    place that reads and writes a request's states at a boundary -- for a context-parallel prefill
    (:class:`kda_ref.context_parallel.PrefixState` is this class), a prefill/decode handoff and the engine."""

    recurrent: dict[int, torch.Tensor]  # KDA layer -> [HV, K, V]
    conv: dict[int, torch.Tensor]  # KDA layer -> [3D, W-1]
    kv: dict[int, torch.Tensor]  # MLA layer -> [rows, Dc + Dp]

    def check(self, config: ModelConfig, name: str = "prefix", tokens: int | None = None) -> None:
        """Refuse (``ValueError`` naming ``name``) a state that misses one of ``config``'s layers or has
        another shape than a pool's, or whose MLA rows do not cover ``tokens`` tokens (when given); checked
        before a context-parallel prefill starts any rank, and before a handed-off state is installed."""
        H, D, W = config.linear_num_heads, config.linear_head_dim, config.short_conv_kernel_size
        parts = {"recurrent": (config.kda_layer_ids, (H, D, D)), "conv": (config.kda_layer_ids, (3 * H * D, W - 1)),
                 "kv": (config.mla_layer_ids, (None, config.mla_latent_dim))}
        rows = set()
        for part, (layers, shape) in parts.items():
            have = getattr(self, part)
            if not isinstance(have, dict) or sorted(have) != sorted(layers):
                raise ValueError(f"{name}: {part} must map exactly the layers {list(layers)} to tensors")
            for layer, t in have.items():
                ok = isinstance(t, torch.Tensor) and t.dim() == len(shape) and all(
                    want is None or got == want for got, want in zip(t.shape, shape))
                if not ok:
                    raise ValueError(f"{name}: {part}[{layer}] must be a tensor of shape {shape} (None: any), got "
                                     f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
                if part == "kv":
                    rows.add(t.shape[0])
        if len(rows) > 1:
            raise ValueError(f"{name}: the MLA layers' cached rows cover different token counts {sorted(rows)}")
        if tokens is not None and rows and rows != {tokens}:
            raise ValueError(f"{name}: the MLA layers' cached rows cover {rows.pop()} tokens, the prompt has {tokens}")


class HybridCacheTensors:
    """``recurrent [L_kda, P, HV, K, V]`` fp32, ``conv [L_kda, P, 3D, W-1]``, ``kv [L_mla, pages, page_size, Dc+Dp]``.

    ``HybridCacheTensors(...)`` allocates zeroed storage (a test, :class:`RequestCache`);
    :meth:`reserve` reserves it uninitialised for a whole byte budget (the engine's memory pool)."""

    def __init__(self, config: ModelConfig, num_slots: int, num_pages: int, page_size: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None, *,
                 zeroed: bool = True, mla_layers: list[int] | None = None):
        """``zeroed=False``: ``torch.empty`` storage (see :meth:`reserve`); every unit must be written
        before it is read. ``mla_layers``: KV for these model layer indices only and no KDA state (an MTP
        layer's own cache, :class:`~kda_ref.speculative.mtp_drafter.MTPDrafter`)."""
        if num_slots < 2:
            raise ValueError(f"num_slots: need at least 2 (slot 0 is PAD), got {num_slots}")
        if num_pages < 2:
            raise ValueError(f"num_pages: need at least 2 (page 0 is PAD), got {num_pages}")
        if page_size < 1:
            raise ValueError(f"page_size: must be positive, got {page_size}")
        c = config
        kda_ids = c.kda_layer_ids if mla_layers is None else []
        mla_ids = c.mla_layer_ids if mla_layers is None else list(mla_layers)
        n_kda, n_mla = len(kda_ids), len(mla_ids)
        H, D, W = c.linear_num_heads, c.linear_head_dim, c.short_conv_kernel_size
        new = torch.zeros if zeroed else torch.empty
        self.config = config
        self.page_size = page_size
        self.recurrent = new(n_kda, num_slots, H, D, D, dtype=torch.float32, device=device)
        self.conv = new(n_kda, num_slots, 3 * c.kda_dim, W - 1, dtype=dtype, device=device)
        self.kv = new(n_mla, num_pages, page_size, c.mla_latent_dim, dtype=dtype, device=device)
        # model layer index -> index within its kind
        self.kda_index = {layer: i for i, layer in enumerate(kda_ids)}
        self.mla_index = {layer: i for i, layer in enumerate(mla_ids)}

    @classmethod
    def reserve(cls, config: ModelConfig, num_slots: int, num_pages: int, page_size: int,
                dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> "HybridCacheTensors":
        """Storage for ``num_slots`` state slots and ``num_pages`` KV pages on ``device``, reserved with
        ``torch.empty``: on Linux only address space until a unit is first written, so a pool can size every
        kind for its whole byte budget while resident memory follows what it allocates
        (:class:`~kda_ref.memory.UnifiedMemoryPool`, which zeroes each state slot it hands out). Slot 0
        and page 0 are the PAD units (:meth:`zero_pad_units` zeroes them)."""
        return cls(config, num_slots, num_pages, page_size, dtype=dtype, device=device, zeroed=False)

    @property
    def num_slots(self) -> int:
        return self.recurrent.shape[1]

    @property
    def num_pages(self) -> int:
        return self.kv.shape[1]

    def zero_pad_units(self) -> None:
        """Zero the reserved PAD slot and PAD page of every layer: a static step's PAD rows read them, and
        what they write there is zeroed again (:mod:`kda_ref.ops.pad_rows`)."""
        for pool in (self.recurrent, self.conv, self.kv):  # [layers, units, ...]
            zero_pad_unit(pool, dim=1)

    def nbytes(self) -> dict:
        return {"recurrent": self.recurrent.nbytes, "conv": self.conv.nbytes, "kv": self.kv.nbytes}

    def kv_rows(self, pages: list[int], layer: int, start: int, stop: int) -> torch.Tensor:
        """MLA layer ``layer``'s latent rows of tokens ``[start, stop)`` of a request holding ``pages``:
        ``[stop - start, Dc + Dp]`` (a copy: gathered through the pages)."""
        pos = torch.arange(start, stop, device=self.kv.device)
        idx = torch.tensor(pages, dtype=torch.long, device=self.kv.device)[pos // self.page_size]
        return self.kv[self.mla_index[layer], idx, pos % self.page_size]

    def read_boundary(self, slot: int, pages: list[int], stop: int, start: int = 0) -> BoundaryState:
        """The state in ``slot`` (the request's state after ``stop`` tokens) and its KV rows ``[start,
        stop)``: copies, so that later steps do not change them."""
        return BoundaryState(recurrent={la: self.recurrent[li, slot].clone() for la, li in self.kda_index.items()},
                             conv={la: self.conv[li, slot].clone() for la, li in self.kda_index.items()},
                             kv={la: self.kv_rows(pages, la, start, stop) for la in self.mla_index})

    def install_boundary(self, slot: int, pages: list[int], state: BoundaryState, start: int = 0) -> None:
        """Write ``state`` as the request's: its recurrent states and conv windows into ``slot``, its KV rows
        into ``pages`` at positions ``start ..`` (as many as it holds)."""
        for layer, li in self.kda_index.items():
            self.recurrent[li, slot] = state.recurrent[layer]
            self.conv[li, slot] = state.conv[layer].to(self.conv.dtype)
        for layer, mi in self.mla_index.items():
            rows = state.kv[layer]
            pos = torch.arange(start, start + rows.shape[0], device=self.kv.device)
            idx = torch.tensor(pages, dtype=torch.long, device=self.kv.device)[pos // self.page_size]
            self.kv[mi, idx, pos % self.page_size] = rows.to(self.kv.dtype)


class RequestCache:
    """A fixed-capacity cache for ``num_seqs`` sequences: sequence i owns slot ``i + 1`` and pages
    ``1 + i * pages_per_seq ...``. Use :meth:`batch` to describe the next forward, then
    :meth:`advance` once it ran.
    """

    def __init__(self, config: ModelConfig, num_seqs: int = 1, max_tokens: int = 2048, page_size: int = 16,
                 dtype: torch.dtype = torch.float32, device=None, mla_layers: list[int] | None = None):
        if num_seqs < 1:
            raise ValueError(f"num_seqs: must be >= 1, got {num_seqs}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens: must be >= 1, got {max_tokens}")
        self.pages_per_seq = cdiv(max_tokens, page_size)
        self.max_tokens = max_tokens
        self.tensors = HybridCacheTensors(config, num_seqs + 1, 1 + num_seqs * self.pages_per_seq, page_size,
                                          dtype=dtype, device=device, mla_layers=mla_layers)
        self.lengths = [0] * num_seqs
        dev = self.tensors.recurrent.device
        self._block_table = (1 + torch.arange(num_seqs * self.pages_per_seq, device=dev)).view(num_seqs, -1)

    def batch(self, new_lens: list[int], seq_ids: list[int] | None = None, **kw) -> ForwardBatch:
        """Metadata for appending ``new_lens[j]`` tokens to sequence ``seq_ids[j]`` (default 0..n-1)."""
        seq_ids = list(range(len(new_lens))) if seq_ids is None else list(seq_ids)
        if len(seq_ids) != len(new_lens) or len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"seq_ids: need one distinct id per entry of new_lens, got {seq_ids}")
        for s, n in zip(seq_ids, new_lens):
            if not 0 <= s < len(self.lengths):
                raise ValueError(f"seq_ids: {s} is not in [0, {len(self.lengths)})")
            if self.lengths[s] + n > self.max_tokens:
                raise ValueError(f"new_lens: sequence {s} would hold {self.lengths[s] + n} > max_tokens={self.max_tokens}")
        dev = self.tensors.recurrent.device
        cu = torch.tensor([0, *torch.tensor(new_lens).cumsum(0).tolist()], dtype=torch.long, device=dev)
        ids = torch.tensor(seq_ids, device=dev)
        return ForwardBatch(cu_seqlens=cu, context_lens=torch.tensor([self.lengths[s] for s in seq_ids], device=dev),
                            state_indices=ids + 1, block_table=self._block_table[ids], **kw)

    def advance(self, batch: ForwardBatch, seq_ids: list[int] | None = None) -> None:
        seq_ids = list(range(batch.num_seqs)) if seq_ids is None else seq_ids
        for s, n in zip(seq_ids, batch.seq_lens):
            self.lengths[s] += n

    def kv_rows(self, seq_id: int, layer: int, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """MLA layer ``layer``'s latent rows ``[stop - start, Dc + Dp]`` of sequence ``seq_id`` at positions
        ``start .. stop - 1`` (default: every token it holds), read through its pages. Tests and the
        context-parallel prefix states read a sequence's KV this way."""
        stop = self.lengths[seq_id] if stop is None else stop
        if not 0 <= start <= stop <= self.lengths[seq_id]:
            raise ValueError(f"start, stop: [{start}, {stop}) is not inside sequence {seq_id}'s "
                             f"{self.lengths[seq_id]} tokens")
        return self.tensors.kv_rows(self._block_table[seq_id].tolist(), layer, start, stop)

    def states(self, seq_id: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """KDA layer ``layer``'s recurrent state ``[HV, K, V]`` and conv window ``[3D, W-1]`` of sequence
        ``seq_id`` (views into the cache)."""
        t = self.tensors
        li = t.kda_index[layer]
        return t.recurrent[li, seq_id + 1], t.conv[li, seq_id + 1]
