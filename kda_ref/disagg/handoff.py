"""What a prefill instance hands a decode instance, and the checks before the decode side uses it.

Article concepts ``pd.state_transfer`` (``docs/article.md#s4-4``, ``#s5-6``): the MLA KV of every prompt
token, each KDA layer's recurrent state and conv window, all at one token boundary, plus the first
sampled token. SGLang sends the KV pages per chunk and the state only with the last
(``prefill.py::send_kv_chunk``); here :func:`kv_rows` gives the rows a prefill chunk finished,
:func:`unsent` what the last send still carries, :func:`capture` (prefill side) the whole handoff and
its :class:`Manifest`, and :func:`verify` (decode side) refuses anything short of it with a
:class:`HandoffError`. Design notes: ``docs/disaggregation.md#what-is-built-2026-12-01``.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass, field

import torch

from ..memory import UnifiedMemoryPool


class HandoffError(ValueError):
    """A handoff the decode side must not install (the message says why)."""


@dataclass(frozen=True)
class RegionSpec:
    kind: str  # "kv" (MLA latent rows) | "state" (KDA recurrent) | "conv" (KDA conv window)
    layer: int  # model layer index
    offset: int  # bytes into the staging / receive buffer
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    crc32: int
    boundary: int  # tokens this region's state or rows cover (every region of a handoff: the same one)


@dataclass
class Manifest:
    req_id: int
    boundary: int  # tokens the regions describe (the prompt)
    prefix_hash: str  # sha256 of those tokens' ids
    first_token: int  # sampled by the prefill side after the boundary
    regions: list[RegionSpec] = field(default_factory=list)
    # the request's sampling generator after that first draw (torch.Generator.get_state), so the decode side's
    # draws continue the stream a single engine would use; None: the request had no generator
    sampler_state: bytes | None = None

    @property
    def total_bytes(self) -> int:
        return sum(r.nbytes for r in self.regions)

    def bytes_by_kind(self) -> dict[str, int]:
        out = {"kv": 0, "state": 0, "conv": 0}
        for r in self.regions:
            out[r.kind] += r.nbytes
        return out


def prefix_hash(token_ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, token_ids)).encode()).hexdigest()


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8)


def _parts(pool: UnifiedMemoryPool, req, boundary: int) -> list[tuple[str, int, torch.Tensor]]:
    """``(kind, layer, tensor)`` of every region of ``req`` at ``boundary``, in the handoff's order: read
    once through the pool's one boundary reader (:meth:`~kda_ref.model.HybridCacheTensors.read_boundary`)."""
    st = pool.tensors.read_boundary(req.slot, req.pages, boundary)
    parts: list[tuple[str, int, torch.Tensor]] = []
    for layer in st.recurrent:
        parts.append(("state", layer, st.recurrent[layer]))
        parts.append(("conv", layer, st.conv[layer]))
    parts += [("kv", layer, rows) for layer, rows in st.kv.items()]  # [boundary, Dc + Dp]
    return parts


def layout(pool: UnifiedMemoryPool, boundary: int) -> list[tuple[str, int, int, int]]:
    """``(kind, layer, offset, nbytes)`` of every region of a ``boundary``-token handoff, known before
    any token is computed: the decode side sizes its receive buffer with it when a request is routed
    to it, and the prefill side streams KV rows to their offsets (same order as :func:`capture`)."""
    t = pool.tensors
    sizes = []
    for layer, li in t.kda_index.items():
        sizes.append(("state", layer, t.recurrent[li, 0].numel() * t.recurrent.element_size()))
        sizes.append(("conv", layer, t.conv[li, 0].numel() * t.conv.element_size()))
    row = t.kv.shape[-1] * t.kv.element_size()
    sizes += [("kv", layer, boundary * row) for layer in t.mla_index]
    out, at = [], 0
    for kind, layer, n in sizes:
        out.append((kind, layer, at, n))
        at += n
    return out


def kv_rows(pool: UnifiedMemoryPool, req, boundary: int, start: int, end: int) -> list[tuple[int, torch.Tensor]]:
    """The MLA KV rows of tokens ``[start, end)`` of ``req`` as ``(offset in the handoff, bytes)``, one
    piece per MLA layer: what a prefill chunk can send before the boundary is final."""
    t = pool.tensors
    row = t.kv.shape[-1] * t.kv.element_size()
    offsets = {layer: off for kind, layer, off, _ in layout(pool, boundary) if kind == "kv"}
    return [(offsets[layer] + start * row, _bytes(t.kv_rows(req.pages, layer, start, end))) for layer in t.mla_index]


def crc(b: torch.Tensor, seed: int = 0) -> int:
    """CRC-32 of a byte tensor's contents, continuing from ``seed`` (the CRC of the bytes before them)."""
    return zlib.crc32(b.cpu().numpy().tobytes(), seed)


def capture(pool: UnifiedMemoryPool, req, boundary: int,
            sent: tuple[int, dict[int, int]] | None = None) -> tuple[torch.Tensor, Manifest]:
    """The regions of ``req`` (its slot, its pages) at ``boundary`` tokens, in one staging buffer: its
    state and conv windows must be the ones after exactly ``boundary`` tokens (a finished prefill).
    ``sent``: ``(rows, CRC-32 per MLA layer)`` when KV rows ``[0, rows)`` left with earlier chunks --
    each KV region's checksum then continues theirs over the rows from there (each byte once)."""
    parts = _parts(pool, req, boundary)
    blobs = [_bytes(x) for _, _, x in parts]
    staging = torch.cat(blobs)
    man = Manifest(req_id=req.req_id, boundary=boundary, prefix_hash=prefix_hash(req.all_token_ids[:boundary]),
                   first_token=req.output_token_ids[0],
                   sampler_state=None if req.generator is None else req.generator.get_state().numpy().tobytes())
    rows, seeds = sent if sent is not None else (0, {})
    at = 0
    for (kind, layer, x), b in zip(parts, blobs):
        check = crc(b[rows * (b.numel() // boundary):], seeds[layer]) if kind == "kv" and rows else crc(b)
        man.regions.append(RegionSpec(kind, layer, at, b.numel(), str(x.dtype).removeprefix("torch."),
                                      tuple(x.shape), check, boundary))
        at += b.numel()
    return staging, man


def unsent(man: Manifest, sent_upto: int) -> list[tuple[int, int]]:
    """``(offset, nbytes)`` of what the last send carries when KV rows ``[0, sent_upto)`` went with
    earlier chunks: every state and conv region, and each KV region's rows from ``sent_upto`` on."""
    out = []
    for r in man.regions:
        if r.kind == "kv":
            row = r.nbytes // max(r.boundary, 1)
            if r.nbytes > sent_upto * row:
                out.append((r.offset + sent_upto * row, r.nbytes - sent_upto * row))
        else:
            out.append((r.offset, r.nbytes))
    return out


def verify(recv: torch.Tensor, man: Manifest, pool: UnifiedMemoryPool, prompt_ids: list[int]) -> dict:
    """The installable tensors ``{(kind, layer): tensor}`` from ``recv`` (the received bytes), or a
    :class:`HandoffError` naming what is wrong."""
    t = pool.tensors
    if man.boundary != len(prompt_ids):
        raise HandoffError(f"boundary: the manifest's state is after {man.boundary} tokens, the prompt has "
                           f"{len(prompt_ids)}")
    if man.prefix_hash != prefix_hash(prompt_ids):
        raise HandoffError("prefix_hash: the regions were computed for other tokens")
    want = {("state", layer) for layer in t.kda_index} | {("conv", layer) for layer in t.kda_index} \
        | {("kv", layer) for layer in t.mla_index}
    have = {(r.kind, r.layer) for r in man.regions}
    if have != want:
        raise HandoffError(f"regions: missing {sorted(want - have)}, unexpected {sorted(have - want)}")
    off = [r for r in man.regions if r.boundary != man.boundary]
    if off:
        r = off[0]
        raise HandoffError(f"boundary: the {r.kind} of layer {r.layer} is after {r.boundary} tokens, the handoff's "
                           f"KV after {man.boundary} (a state and KV of different boundaries)")
    if recv.numel() < man.total_bytes:
        raise HandoffError(f"recv: {recv.numel()} bytes arrived, the manifest lists {man.total_bytes}")
    out = {}
    for r in man.regions:
        b = recv[r.offset:r.offset + r.nbytes]
        if crc(b) != r.crc32:
            raise HandoffError(f"checksum: region {r.kind} of layer {r.layer} does not match its CRC-32")
        ref = {"state": t.recurrent, "conv": t.conv, "kv": t.kv}[r.kind]
        shape = tuple(ref.shape[2:]) if r.kind != "kv" else (man.boundary, ref.shape[-1])
        if r.shape != shape or r.dtype != str(ref.dtype).removeprefix("torch."):
            raise HandoffError(f"shape: region {r.kind} of layer {r.layer} is {r.dtype} {r.shape}, this pool "
                               f"holds {ref.dtype} {shape}")
        out[(r.kind, r.layer)] = b.clone().view(ref.dtype).view(r.shape)
    return out
