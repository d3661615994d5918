"""``summarize_tensor``: a small JSON-able picture of a tensor for the events that show one.

Tensors never go in a trace event; an event that needs to show a state holds this summary (shape,
norm, range and a block-averaged heatmap of at most ``max_side x max_side`` cells) instead.
"""

import math

__all__ = ["summarize_tensor"]



def _edges(n: int, m: int) -> list[int]:
    """``m`` near-equal blocks over ``n`` items: block i is ``[edges[i], edges[i+1])``."""
    return [(i * n) // m for i in range(m + 1)]


def summarize_tensor(t, max_side: int = 16) -> dict:
    """A small JSON-able summary of a tensor, for the events that show one.

    Returns ``{"shape", "dtype", "numel", "norm", "min", "max", "mean", "nonfinite", "heatmap",
    "row_edges", "col_edges"}``: the tensor viewed as a matrix and split into at most ``max_side``
    near-equal blocks per side, ``heatmap[i][j]`` the mean of block ``row_edges[i]:row_edges[i+1]`` x
    ``col_edges[j]:col_edges[j+1]``. Raises ``ValueError`` for a ``max_side`` that is not an int >= 1.
    Design notes: ``docs/trace.md#tensor-summaries``.
    """
    import torch  # optional dependency of the trace layer: only summaries need it

    if isinstance(max_side, bool) or not isinstance(max_side, int) or max_side < 1:
        raise ValueError(f"max_side: must be an int >= 1, got {max_side!r}")
    if not isinstance(t, torch.Tensor):
        t = torch.as_tensor(t)
    dtype = str(t.dtype).replace("torch.", "")
    shape = [int(s) for s in t.shape]
    x = t.detach().to(device="cpu", dtype=torch.float64)
    out = {"shape": shape, "dtype": dtype, "numel": x.numel()}
    if x.numel() == 0:
        out.update(norm=0.0, min=None, max=None, mean=None, nonfinite=0, heatmap=[], row_edges=[], col_edges=[])
        return out
    heat, re_, ce_ = _block_means(_as_matrix(x), max_side)
    finite = x[torch.isfinite(x)]
    out.update(
        norm=_json_float(torch.linalg.vector_norm(x)),
        min=float(finite.min()) if finite.numel() else None,
        max=float(finite.max()) if finite.numel() else None,
        mean=_json_float(x.mean()),
        nonfinite=int(x.numel() - finite.numel()),
        heatmap=[[_json_float(v) for v in row] for row in heat],
        row_edges=re_,
        col_edges=ce_,
    )
    return out


def _json_float(v) -> float | None:
    """``v`` as a float, or ``None`` where it is NaN or infinite: plain JSON has neither (``json.dumps``
    would write the non-standard ``NaN`` / ``Infinity``, and ``NaN`` never reads back equal to itself)."""
    v = float(v)
    return v if math.isfinite(v) else None


def _as_matrix(x):
    """``x`` viewed as a matrix: a scalar as ``[1, 1]``, a vector as ``[1, n]``, ``[..., R, C]`` as ``[-1, C]``."""
    if x.dim() == 0:
        return x.reshape(1, 1)
    if x.dim() == 1:
        return x.reshape(1, -1)
    return x.reshape(-1, x.shape[-1])


def _block_means(m, max_side: int) -> tuple[list, list[int], list[int]]:
    """``(heatmap, row_edges, col_edges)``: the means of ``m``'s blocks, at most ``max_side`` per side."""
    import torch

    R, C = m.shape
    out_r, out_c = min(R, max_side), min(C, max_side)
    re_, ce_ = _edges(R, out_r), _edges(C, out_c)
    # block ids per row / column, then block sums with two index_adds (a NaN stays in its block)
    rid = torch.bucketize(torch.arange(R), torch.tensor(re_[1:-1]), right=True)
    cid = torch.bucketize(torch.arange(C), torch.tensor(ce_[1:-1]), right=True)
    rows = torch.zeros(out_r, C, dtype=torch.float64).index_add_(0, rid, m)  # [out_r, C]
    sums = torch.zeros(out_r, out_c, dtype=torch.float64).index_add_(1, cid, rows)  # [out_r, out_c]
    counts = torch.tensor([b - a for a, b in zip(re_, re_[1:])], dtype=torch.float64)[:, None] \
        * torch.tensor([b - a for a, b in zip(ce_, ce_[1:])], dtype=torch.float64)[None, :]
    return (sums / counts).tolist(), re_, ce_
