"""The step-major chunk layout shared by both torch chunk paths (readable and blocked).

Article concept ``kda.chunk_form``: a batch of sequences is cut into chunks of C tokens; the state
moves from chunk to chunk in order, so chunks are stored by step (chunk j of every sequence that
has one, together) — the Python loop over steps then touches contiguous slices only. This is the
torch counterpart of fla's ``prepare_chunk_indices(cu_seqlens, chunk_size)``.
"""

from __future__ import annotations

import torch


class ChunkLayout:
    """Where every token of every sequence sits in the chunked, step-major layout.

    Sequences are sorted by their number of chunks (descending); chunk step j of every sequence
    that still has one is stored contiguously, so ``steps[j] = (start, count)`` describes the
    slice of chunks and the prefix of (sorted) sequences active at step j. ``regular`` layouts
    (every sequence a full row of the batch, T a multiple of C) are a pure reshape of the input:
    chunk ``j * B + b`` is tokens ``[j C, (j + 1) C)`` of row b.
    """

    def __init__(self, seqs: list[tuple[int, int, int]], T: int, C: int, device: torch.device):
        self.C, self.T, self.device = C, T, device
        self.rows = seqs[-1][0] + 1  # batch rows B
        lengths = [e - s for _, s, e in seqs]
        self.n_chunks = [(L + C - 1) // C for L in lengths]
        self.order = sorted(range(len(seqs)), key=lambda n: -self.n_chunks[n])  # sorted pos -> seq
        self.regular = T % C == 0 and all(s == 0 and e == T for _, s, e in seqs)
        max_nc = self.n_chunks[self.order[0]]
        seq_major_base = [0]  # chunk id of (seq n, chunk 0) in (sequence, chunk) order
        for nc in self.n_chunks:
            seq_major_base.append(seq_major_base[-1] + nc)
        self.total_chunks = seq_major_base[-1]
        self.steps: list[tuple[int, int]] = []
        first_token: list[int] = []  # flat token row of every chunk's first slot, step-major
        valid: list[int] = []  # real tokens in every chunk (C except a sequence's last chunk)
        to_seq_major: list[int] = []
        start = 0
        for j in range(max_nc):
            active = [n for n in self.order if self.n_chunks[n] > j]
            self.steps.append((start, len(active)))
            start += len(active)
            for n in active:
                b, s, e = seqs[n]
                first_token.append(b * T + s + j * C)
                valid.append(min(C, e - s - j * C))
                to_seq_major.append(seq_major_base[n] + j)
        self._first_token = torch.tensor(first_token, dtype=torch.long, device=device)
        self._valid = torch.tensor(valid, dtype=torch.long, device=device)
        # step-major chunk position -> (sequence, chunk) order position, and its inverse
        self.to_seq_major = torch.tensor(to_seq_major, dtype=torch.long, device=device)
        self.from_seq_major = torch.empty_like(self.to_seq_major)
        self.from_seq_major[self.to_seq_major] = torch.arange(len(to_seq_major), device=device)
        self.unsort = torch.empty(len(seqs), dtype=torch.long, device=device)
        self.unsort[torch.tensor(self.order, device=device)] = torch.arange(len(seqs), device=device)
        self._token_index: torch.Tensor | None = None
        self._token_slot: torch.Tensor | None = None

    @property
    def token_index(self) -> torch.Tensor:
        """Flat token row (``b * T + t``) of every slot of the chunk layout, -1 for padding."""
        if self._token_index is None:
            # built outside inference mode: the layout is kept for later calls (kda_chunk.chunk_layout)
            with torch.inference_mode(False):
                pos = torch.arange(self.C, device=self.device)
                idx = self._first_token[:, None] + pos  # [NCT, C]
                self._token_index = idx.masked_fill(pos >= self._valid[:, None], -1).flatten()
        return self._token_index

    @property
    def token_slot(self) -> torch.Tensor:
        """Inverse of :attr:`token_index`: the layout slot of every real token, in token order."""
        if self._token_slot is None:
            with torch.inference_mode(False):  # as token_index
                valid = (self.token_index >= 0).nonzero().squeeze(1)
                self._token_slot = torch.empty(self.T * self.rows, dtype=torch.long, device=self.device)
                self._token_slot[self.token_index[valid]] = valid
        return self._token_slot

    def blocks(self, max_chunks: int) -> list[tuple[int, int, int, int]]:
        """Consecutive chunk steps grouped into ``(c0, c1, j0, j1)`` blocks of at most ``max_chunks``
        chunks (a single step may exceed it) — the unit :mod:`kda_ref.ops.kda_chunk_blocked` keeps in cache."""
        out: list[tuple[int, int, int, int]] = []
        j0 = 0
        for j, (start, count) in enumerate(self.steps):
            c0 = self.steps[j0][0]
            if j > j0 and start + count - c0 > max_chunks:
                out.append((c0, start, j0, j))
                j0 = j
        out.append((self.steps[j0][0], self.total_chunks, j0, len(self.steps)))
        return out

    def out_rows(self, c0: int, c1: int, HV: int) -> torch.Tensor:
        """Destination row in ``[B*T*HV (+1 dump row), V]`` of every (chunk, head, slot) of chunks
        ``[c0, c1)``; padding slots point at the dump row ``B*T*HV``."""
        tok = self.token_index[c0 * self.C : c1 * self.C].view(c1 - c0, 1, self.C)
        dest = tok * HV + torch.arange(HV, device=self.device).view(1, HV, 1)
        return torch.where(tok < 0, self.rows * self.T * HV, dest).flatten()
