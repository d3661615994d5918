"""The "sequential but segmentable" page (``docs/article.md#s1-3``): split a sequence anywhere, keep the order,
get the same state — and the chunk kernel's chunk-start states come for free. No Streamlit here; the figures are in
:mod:`model_viz.figures.kda_segments`.

:func:`run_segments` runs one random KDA input in one pass (:func:`kda_ref.ops.recurrent_kda`), segment
by segment in order and with two segments swapped (:func:`kda_ref.ops.chunk_kda`), and once with
``return_intermediate_states=True``.

Design notes: ``docs/tutorials/kda_segments.md#0-what-runs``.
"""

from __future__ import annotations
from dataclasses import dataclass
import torch
from kda_ref.ops import chunk_kda, l2norm, recurrent_kda
from ..i18n import LocalizedError


T_LEN = 96
HEADS = 2
DIM = 16
CHUNK = 16
DEFAULT_SPLITS = (21, 40, 70)


class SplitError(LocalizedError):
    """Split points the page cannot use. Carries an i18n key."""


def make_inputs(seed: int = 0, T: int = T_LEN, H: int = HEADS, D: int = DIM) -> dict[str, torch.Tensor]:
    """Random KDA inputs in fla layout (``[1, T, H, D]``; unit-norm q, k; log decays with
    ``alpha = exp(g)`` in about (0.92, 1); ``beta`` in (0, 1)), float32."""
    g = torch.Generator().manual_seed(int(seed))
    q = l2norm(torch.randn(1, T, H, D, generator=g))
    k = l2norm(torch.randn(1, T, H, D, generator=g))
    v = torch.randn(1, T, H, D, generator=g)
    gate = -0.08 * torch.rand(1, T, H, D, generator=g)
    beta = torch.sigmoid(torch.randn(1, T, H, generator=g))
    return {"q": q, "k": k, "v": v, "g": gate, "beta": beta}


def check_splits(splits, T: int = T_LEN) -> list[int]:
    """Sorted, unique split points strictly inside ``(0, T)``; :class:`SplitError` otherwise."""
    out = sorted({int(s) for s in splits})
    bad = [s for s in out if not 0 < s < T]
    if bad:
        raise SplitError("kda_segments.err.range", s=bad[0], T=T)
    return out


def bounds_of(splits, T: int = T_LEN) -> list[int]:
    """Segment boundaries ``[0, s1, ..., T]``."""
    return [0, *check_splits(splits, T), T]


def _run_in_order(x: dict, segs: list[tuple[int, int]]) -> list[torch.Tensor]:
    """Process ``segs`` (``(start, end)`` ranges of the sequence) one after the other with the chunk
    kernel, each from the previous final state; returns the state after every segment ``[H, K, V]``."""
    state, out = None, []
    for s, e in segs:
        _, state = chunk_kda(x["q"][:, s:e], x["k"][:, s:e], x["v"][:, s:e], x["g"][:, s:e], x["beta"][:, s:e],
                             initial_state=state, output_final_state=True, chunk_size=CHUNK)
        out.append(state[0])
    return out


@dataclass
class SegmentResult:
    bounds: list[int]  # [0, s1, ..., T]
    swap: int | None  # segments swap and swap + 1 exchanged (None: fewer than two segments)
    one_pass: torch.Tensor  # [T, H, K, V] state after every token, recurrent reference
    in_order: list[torch.Tensor]  # state after every segment, chunk kernel, in order: [H, K, V] each
    swapped_final: torch.Tensor | None  # final state with two segments swapped
    chunk_starts: torch.Tensor  # [NT, H, K, V] state at the start of every chunk (one chunk_kda call)

    @property
    def T(self) -> int:
        return self.one_pass.shape[0]

    def one_pass_at(self, pos: int) -> torch.Tensor:
        """The one-pass state after ``pos`` tokens (zeros for 0)."""
        return torch.zeros_like(self.one_pass[0]) if pos == 0 else self.one_pass[pos - 1]

    def boundary_diff(self, j: int) -> float:
        """``max |in-order state after segment j - one-pass state at that position|``."""
        return float((self.in_order[j] - self.one_pass_at(self.bounds[j + 1])).abs().max())

    def swapped_diff(self) -> float | None:
        if self.swapped_final is None:
            return None
        return float((self.swapped_final - self.one_pass[-1]).abs().max())

    def chunk_diff(self) -> float:
        """``max |chunk-start state - one-pass state at the chunk start|`` over all chunks."""
        ref = torch.stack([self.one_pass_at(c * CHUNK) for c in range(self.chunk_starts.shape[0])])
        return float((self.chunk_starts - ref).abs().max())


def run_segments(seed: int = 0, splits=DEFAULT_SPLITS, swap: int | None = None, T: int = T_LEN) -> SegmentResult:
    """Everything the page shows for one input sequence and one set of split points; ``swap`` = i
    exchanges segments i and i + 1 (0-based; default and out of range: the last two)."""
    x = make_inputs(seed, T)
    bounds = bounds_of(splits, T)
    with torch.no_grad():
        _, _, steps = recurrent_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], output_final_state=True,
                                    return_step_states=True)
        segs = list(zip(bounds, bounds[1:]))
        in_order = _run_in_order(x, segs)
        swapped = None
        if len(segs) >= 2:
            swap = len(segs) - 2 if swap is None else max(0, min(int(swap), len(segs) - 2))
            order = segs[:swap] + [segs[swap + 1], segs[swap]] + segs[swap + 2:]
            swapped = _run_in_order(x, order)[-1]
        else:
            swap = None
        _, _, h = chunk_kda(x["q"], x["k"], x["v"], x["g"], x["beta"], output_final_state=True, chunk_size=CHUNK,
                            return_intermediate_states=True)
    return SegmentResult(bounds=bounds, swap=swap, one_pass=steps[0], in_order=in_order, swapped_final=swapped,
                         chunk_starts=h[0])
