"""``ForwardBatch``: the metadata one forward pass needs to find every sequence's state.

Article concept ``varlen.metadata`` (``docs/article.md#s0``, the summary table's "varlen batching"): the new
tokens of N sequences packed into one ``[T]`` tensor described by ``cu_seqlens``, each sequence's state
found by index. SGLang ``ForwardBatch`` + linear attention metadata (``mamba_cache_indices`` /
``state_indices``, ``has_initial_state``, ``req_to_token``); vLLM 0.32.0 ``GDNAttentionMetadata``
(``non_spec_state_indices_tensor``, ``spec_state_indices_tensor``, ``has_initial_state``) /
``Mamba2AttentionMetadata`` (``state_indices_tensor_p`` / ``_d``, ``has_initial_states_p``), built from the
block table of ``CommonAttentionMetadata``.
Phases and the ``mixed_batch`` grouping: :meth:`ForwardBatch.phase_groups`; the all-decode fast path:
:meth:`ForwardBatch.decode_plan`. Design notes: ``docs/model.md#the-forward-batch``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..ops.dispatcher import KDAPhase
from ..ops.pad_rows import PAD_SLOT_ID  # noqa: F401 -- re-exported: the index of a PAD row of a static step
from .config import MIXED_BATCH_POLICIES
from .verify_record import KEEP_STATES, VerifyRecord, verify_record


@dataclass
class PhaseGroup:
    phase: KDAPhase
    seq_ids: torch.Tensor  # [n] positions in the batch
    token_ids: torch.Tensor  # [t] positions of their tokens in the packed batch
    cu_seqlens: torch.Tensor  # [n + 1] offsets within the group


@dataclass
class DecodePlan:
    """Indices of an all-decode step (one new token per sequence, each continuing its cache), made
    once per step and shared by every layer: the fixed-shape metadata a CUDA-graph decode step
    replays (SGLang ``CudaGraphRunner`` / vLLM's persistent decode input buffers), here rebuilt per
    step because the torch CPU path has no graph to replay."""

    cu_seqlens: torch.Tensor  # [N + 1] = arange(N + 1)
    state_indices: torch.Tensor  # [N] KDA state slots
    kv_write: torch.Tensor  # [N] flat latent row (page * page_size + offset) of every new token
    kv_pages: torch.Tensor  # [N, P] the first P pages of every sequence, P = pages of the longest one
    kv_bias: torch.Tensor  # [N, 1, P * page_size] 0 where the position is cached (incl. the new token), else -inf
    kv_pad: torch.Tensor  # [N, P * page_size, 1] True past a sequence's end (never-written rows, zeroed)
    kv_lens: torch.Tensor  # [N] cached tokens incl. the new one (context_lens + 1)
    block_table: torch.Tensor  # [N, max_pages] (the Triton paged kernel reads pages itself)
    slot_range: tuple[int, int] | None = None  # (start, N) when state_indices == start .. start + N - 1
    # a static-shape step (kda_ref.engine.static_decode): rows whose state_indices / kv_write are
    # PAD_SLOT_ID (-1) read zeros and write nothing (kda_ref.ops.pad_rows)
    pad: bool = False
    # a verify step (ForwardBatch.verify_plan): every sequence appends ``tokens`` tokens; kv_write is then
    # [N * tokens] and kv_bias [N, tokens, P * page_size] (token t sees positions <= context + t)
    tokens: int = 1
    context_lens: torch.Tensor | None = None  # [N] tokens cached before the step (verify)
    # a verify step with keep="slots": the slot that receives the state after each token, [N * tokens]
    # (PAD rows: PAD_SLOT_ID); None: the step returns the per-token states instead
    verify_slots: torch.Tensor | None = None
    # a draft tree laid out as each row's ``tokens`` (kda_ref.engine.tree_verify): token t continues from
    # the state after token parents[t] of its row (-1: the committed state), its short conv reads the
    # inputs conv_index[t] ([tokens, W] rows of cat(committed window, the row's inputs)) along its own
    # branch, and kv_bias lets it attend to its ancestors only
    parents: tuple[int, ...] | None = None
    conv_index: torch.Tensor | None = None


@dataclass
class ForwardBatch:
    cu_seqlens: torch.Tensor  # [N + 1] int64 offsets of the new tokens
    context_lens: torch.Tensor  # [N] tokens of each sequence already cached before this batch
    state_indices: torch.Tensor | None = None  # [N] KDA state slot of each sequence
    block_table: torch.Tensor | None = None  # [N, max_pages] MLA latent pages of each sequence
    # what the forward should keep besides logits (returned in a ForwardOutput, kda_ref.model.output)
    verify: bool = False  # speculative verification: per-step states, no state written to the pool (but see "slots")
    verify_seqs: tuple[int, ...] = ()  # or only these sequences (batch positions) verify
    # what a verify segment keeps (kda_ref.model.verify_record): the states after every token (KEEP_STATES),
    # each token's inputs (KEEP_INPUTS, ReplaySSM), or -- WRITE_SLOTS -- the states, which the fused verify step
    # (a uniform verify batch) given ``verify_slots`` writes after token t of sequence n into slot
    # ``verify_slots[n, t]`` of the pools, in place, returning none (vLLM's 1 + num_spec state blocks)
    verify_keep: VerifyRecord | str = KEEP_STATES
    verify_slots: torch.Tensor | None = None  # [N, L] (a record that writes slots)
    mixed_batch: str = "chunk"  # "chunk" | "split": how a batch mixing decodes and extends is run (see above)
    return_chunk_states: bool = False  # record chunk-start states (free checkpoints) per KDA layer
    probe: bool = False  # record every KDA layer's gates (g, beta) for inspection

    def __post_init__(self) -> None:
        cu = self.cu_seqlens
        if cu.dim() != 1 or cu.numel() < 2:
            raise ValueError(f"cu_seqlens: must be 1-D with N + 1 >= 2 entries, got shape {tuple(cu.shape)}")
        self.seq_lens = (cu[1:] - cu[:-1]).tolist()
        if min(self.seq_lens) < 1:
            raise ValueError(f"cu_seqlens: every sequence needs >= 1 new token, got lengths {self.seq_lens}")
        N = len(self.seq_lens)
        if self.context_lens.shape != (N,):
            raise ValueError(f"context_lens: must be [N={N}], got {tuple(self.context_lens.shape)}")
        if self.state_indices is not None and self.state_indices.shape != (N,):
            raise ValueError(f"state_indices: must be [N={N}], got {tuple(self.state_indices.shape)}")
        if self.block_table is not None and (self.block_table.dim() != 2 or self.block_table.shape[0] != N):
            raise ValueError(f"block_table: must be [N={N}, max_pages], got {tuple(self.block_table.shape)}")
        self.verify_seqs = tuple(sorted(set(int(n) for n in self.verify_seqs)))
        if self.verify_seqs and not 0 <= self.verify_seqs[0] <= self.verify_seqs[-1] < N:
            raise ValueError(f"verify_seqs: batch positions must lie in [0, {N}), got {list(self.verify_seqs)}")
        if not isinstance(self.verify_keep, VerifyRecord):  # a record's name (a decode batch has the default)
            self.verify_keep = verify_record(self.verify_keep)
        if self.verify_slots is not None and (self.verify_slots.dim() != 2 or self.verify_slots.shape[0] != N):
            raise ValueError(f"verify_slots: must be [N={N}, L], got {tuple(self.verify_slots.shape)}")
        if self.mixed_batch not in MIXED_BATCH_POLICIES:
            raise ValueError(f"mixed_batch: must be one of {MIXED_BATCH_POLICIES}, got {self.mixed_batch!r}")

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def num_tokens(self) -> int:
        return int(self.cu_seqlens[-1])

    @property
    def has_initial_state(self) -> torch.Tensor:
        return self.context_lens > 0

    def _context_list(self) -> list[int]:
        ctx = self.__dict__.get("_ctx_list")
        if ctx is None:
            ctx = self.__dict__["_ctx_list"] = self.context_lens.tolist()
        return ctx

    def is_verify(self, n: int) -> bool:
        """Does sequence ``n`` of the batch run as a speculative verification?"""
        return self.verify or n in self.verify_seqs

    @property
    def is_decode_only(self) -> bool:
        """Every sequence appends exactly one token to a non-empty cache (and none verifies)."""
        return (not self.verify and not self.verify_seqs and max(self.seq_lens) == 1
                and min(self._context_list()) > 0)

    @property
    def is_uniform_verify(self) -> bool:
        """Every sequence verifies the same number (> 1) of tokens after a cached context: the shape
        of the model's fused verify step (vLLM's "uniform batch": every query ``1 + num_spec`` long)."""
        L = self.seq_lens[0]
        return ((self.verify or len(self.verify_seqs) == self.num_seqs) and L > 1
                and min(self.seq_lens) == max(self.seq_lens) and min(self._context_list()) > 0)

    def phases(self) -> list[str]:
        """Each sequence's own phase: ``"decode"``, ``"extend"`` or ``"verify"`` (which kernel runs it
        depends on ``mixed_batch``: :meth:`phase_groups`)."""
        return ["verify" if self.is_verify(n) else ("decode" if L == 1 and c > 0 else "extend")
                for n, (L, c) in enumerate(zip(self.seq_lens, self._context_list()))]

    def decode_plan(self, page_size: int) -> DecodePlan:
        """The :class:`DecodePlan` of an all-decode batch (computed once, then cached)."""
        cached = self.__dict__.get("_decode_plan")
        if cached is not None and cached[0] == page_size:
            return cached[1]
        if not self.is_decode_only:
            raise ValueError("batch: decode_plan needs one new token per sequence, each with a cached context")
        if self.state_indices is None or self.block_table is None:
            raise ValueError("batch: a cached forward needs state_indices and block_table")
        ctx_list = self._context_list()
        if max(ctx_list) // page_size >= self.block_table.shape[1]:
            raise ValueError("block_table: too few pages for the tokens of this batch")
        ctx, table = self.context_lens, self.block_table
        N, P = len(ctx_list), max(ctx_list) // page_size + 1
        # whole pages are read (page-sized copies); positions past a sequence's end -- the rest of its
        # last page, or pages its table pads with PAD page 0 -- were never written (the engine's pool is
        # torch.empty: any bits, NaN included), so they are zeroed after the gather and masked
        pos = torch.arange(P * page_size, device=ctx.device)  # [P * page_size]
        write = table.gather(1, (ctx // page_size)[:, None])[:, 0] * page_size + ctx % page_size  # [N] flat row
        pad = pos[None, :] > ctx[:, None]  # [N, P * page_size]
        bias = torch.zeros(N, 1, P * page_size, device=ctx.device).masked_fill_(pad[:, None, :], float("-inf"))
        plan = DecodePlan(cu_seqlens=self.cu_seqlens, state_indices=self.state_indices, kv_write=write,
                          kv_pages=table[:, :P].contiguous(), kv_bias=bias, kv_pad=pad[:, :, None],
                          kv_lens=ctx + 1, block_table=table, slot_range=self._slot_range())
        self.__dict__["_decode_plan"] = (page_size, plan)
        return plan

    def verify_plan(self, page_size: int) -> DecodePlan:
        """The :class:`DecodePlan` of a uniform verify batch (:attr:`is_uniform_verify`): every sequence
        appends ``L`` tokens; computed once, then cached."""
        cached = self.__dict__.get("_verify_plan")
        if cached is not None and cached[0] == page_size:
            return cached[1]
        if not self.is_uniform_verify:
            raise ValueError("batch: verify_plan needs every sequence to verify the same number (> 1) of tokens "
                             "after a cached context")
        if self.state_indices is None or self.block_table is None:
            raise ValueError("batch: a cached forward needs state_indices and block_table")
        ctx, table, L = self.context_lens, self.block_table, self.seq_lens[0]
        N, P = ctx.shape[0], (max(self._context_list()) + L - 1) // page_size + 1
        if P > table.shape[1]:
            raise ValueError("block_table: too few pages for the tokens of this batch")
        tok = ctx[:, None] + torch.arange(L, device=ctx.device)  # [N, L] absolute position of every new token
        write = table.gather(1, tok // page_size) * page_size + tok % page_size  # [N, L] flat latent row
        pos = torch.arange(P * page_size, device=ctx.device)  # [P * page_size]
        bias = torch.zeros(N, L, P * page_size, device=ctx.device).masked_fill_(pos > tok[..., None], float("-inf"))
        pad = pos[None, :] > tok[:, -1:]  # [N, P * page_size]: never written (zeroed after the gather)
        plan = DecodePlan(cu_seqlens=self.cu_seqlens, state_indices=self.state_indices, kv_write=write.reshape(-1),
                          kv_pages=table[:, :P].contiguous(), kv_bias=bias, kv_pad=pad[:, :, None], kv_lens=ctx + L,
                          block_table=table, tokens=L, context_lens=ctx, slot_range=self._slot_range(),
                          verify_slots=None if self.verify_slots is None or not self.verify_keep.writes_slots
                          else self.verify_slots.reshape(-1))
        self.__dict__["_verify_plan"] = (page_size, plan)
        return plan

    def _slot_range(self) -> tuple[int, int] | None:
        """``(start, N)`` when the sequences' state slots are ``start .. start + N - 1``: the pools are
        then read (and a decode updates them) through views instead of gathers."""
        slots = self.state_indices.tolist()
        return (slots[0], len(slots)) if slots == list(range(slots[0], slots[0] + len(slots))) else None

    @classmethod
    def prefill(cls, seq_lens: list[int], device=None) -> "ForwardBatch":
        """Metadata for fresh sequences with no cache (the stateless forward)."""
        cu = torch.tensor([0, *torch.tensor(seq_lens).cumsum(0).tolist()], dtype=torch.long, device=device)
        return cls(cu_seqlens=cu, context_lens=torch.zeros(len(seq_lens), dtype=torch.long, device=device))

    def phase_groups(self) -> list[PhaseGroup]:
        """Split the batch into a decode group and an extend group (or one verify group); computed once
        per batch (every KDA layer asks)."""
        key = (self.verify, self.verify_seqs)
        cached = self.__dict__.get("_phase_groups")
        if cached is not None and cached[0] == key:
            return cached[1]
        groups = self._split_phases()
        self.__dict__["_phase_groups"] = (key, groups)
        return groups

    def _split_phases(self) -> list[PhaseGroup]:
        kinds = [KDAPhase(p) for p in self.phases()]
        if self.mixed_batch == "chunk" and KDAPhase.EXTEND in kinds:  # a mixed step: one extend group
            kinds = [KDAPhase.EXTEND if kd is KDAPhase.DECODE else kd for kd in kinds]
        offs = self.cu_seqlens.tolist()
        groups = []
        for phase in (KDAPhase.DECODE, KDAPhase.EXTEND, KDAPhase.VERIFY):
            ids = [n for n, kd in enumerate(kinds) if kd is phase]
            if not ids:
                continue
            toks, cu = [], [0]
            for n in ids:
                toks.extend(range(offs[n], offs[n + 1]))
                cu.append(cu[-1] + self.seq_lens[n])
            dev = self.cu_seqlens.device
            groups.append(PhaseGroup(phase=phase, seq_ids=torch.tensor(ids, device=dev),
                                     token_ids=torch.tensor(toks, device=dev),
                                     cu_seqlens=torch.tensor(cu, dtype=torch.long, device=dev)))
        return groups
