"""Causal depthwise short convolution of the KDA layer, and its conv state.

Article concept ``state.conv`` (the third kind of state, ``docs/article.md#s1-2``): each KDA layer keeps the
last ``W - 1`` inputs of its q/k/v short convolution (W = 4 in Kimi-Linear), restored at exactly the same
token boundary as the recurrent state ("boundary consistency", ``docs/article.md#s4-2``). Conv state
``[N, D, W - 1]``, oldest input in column 0: the layout vLLM's conv kernels read (vLLM 0.32 stores ``[N, W - 1, D]``
by default and passes the kernels a transposed view: ``vllm/model_executor/layers/mamba/mamba_utils.py::
get_conv_state_layout``, ``docs/kda.md``).

* :func:`causal_conv1d` — prefill / extend over a varlen batch (``causal_conv1d_fn`` in SGLang / vLLM).
* :func:`causal_conv1d_update` — one decode token per sequence (``causal_conv1d_update``).

Design notes: ``docs/kda.md#gates-norms-and-the-short-convolution``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._checks import check_cu_seqlens
from .pad_rows import gather_rows, write_rows


def _check_weight(weight: torch.Tensor, D: int) -> int:
    if weight.dim() != 2 or weight.shape[0] != D:
        raise ValueError(f"weight: must be [D={D}, W], got {tuple(weight.shape)}")
    if weight.shape[1] < 1:
        raise ValueError("weight: kernel width W must be >= 1")
    return weight.shape[1]


def _check_state(conv_state: torch.Tensor, N: int, D: int, W: int) -> None:
    if conv_state.shape != (N, D, W - 1):
        raise ValueError(f"conv_state: must be [N, D, W-1] = {(N, D, W - 1)}, got {tuple(conv_state.shape)}")


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    cu_seqlens: torch.Tensor | None = None,
    conv_state: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    activation: str | None = "silu",
):
    """Causal depthwise conv over packed sequences.

    Args:
        x: ``[T, D]`` packed tokens (with ``cu_seqlens``) or ``[B, T, D]``; weight: ``[D, W]``.
        cu_seqlens: ``[N + 1]`` offsets into ``x`` when it is packed ``[T, D]``.
        conv_state: ``[N, D, W - 1]`` the inputs before each sequence (ignored where
            ``has_initial_state`` is False; zeros when None).
        has_initial_state: bool ``[N]``; default True where ``conv_state`` is given.
        activation: ``"silu"`` or ``None``.

    Returns:
        ``(y, new_conv_state)``: y like x, new_conv_state ``[N, D, W - 1]`` = the last W-1 inputs of every
        sequence (reaching into the initial state for sequences shorter than W-1).
    """
    xs, offs, W = _conv_inputs(x, weight, cu_seqlens, conv_state, has_initial_state, activation)
    N, D = len(offs) - 1, xs.shape[1]
    dt = torch.float64 if x.dtype == torch.float64 else torch.float32
    if conv_state is None:  # what each sequence continues from
        hist = torch.zeros(N, D, W - 1, dtype=dt, device=x.device)
    elif has_initial_state is None:
        hist = conv_state.to(dt)
    else:
        hist = conv_state.to(dt, copy=True).masked_fill_((has_initial_state == 0).view(N, 1, 1), 0.0)  # not * 0: NaN
    w = weight.to(dt).t().contiguous()  # [W, D]: each tap a contiguous row
    lens = {e - s for s, e in zip(offs, offs[1:])}
    if len(lens) == 1:  # equal lengths: [N, L, D], no row index
        L = lens.pop()
        y, new_state = _taps_behind(xs.to(dt).view(N, L, D), hist.transpose(1, 2), w)
        y = y.view(N * L, D)
    else:
        full, tok_rows, ends = _with_history(xs.to(dt), hist, offs)
        # z[r] uses full[r .. r+W-1]: token t (at full row p) reads rows p-W+1 .. p, so y_t = z[p - W + 1]
        y = _taps(full, w, full.shape[0] - (W - 1)).index_select(0, tok_rows - (W - 1))
        # each sequence's last W-1 inputs (its history included): the rows before its segment's end
        last = (ends - (W - 1)).unsqueeze(1) + torch.arange(W - 1, device=x.device)  # [N, W-1]
        new_state = full[last].transpose(1, 2)  # [N, W-1, D] -> [N, D, W-1]
    if activation == "silu":
        y = F.silu(y, inplace=True)
    y = y.to(x.dtype)
    new_state = new_state.to(conv_state.dtype if conv_state is not None else x.dtype)
    return (y.view(x.shape) if x.dim() == 3 else y), new_state


def _conv_inputs(x, weight, cu_seqlens, conv_state, has_initial_state, activation):
    """:func:`causal_conv1d`'s checks: ``(x as packed rows [T, D], cu_seqlens as a list, W)``, or a
    ``ValueError`` naming the argument."""
    if activation not in ("silu", None):
        raise ValueError(f"activation: must be 'silu' or None, got {activation!r}")
    if x.dim() == 3:
        if cu_seqlens is not None:
            raise ValueError("cu_seqlens: pass packed [T, D] input with cu_seqlens, not [B, T, D]")
        B, T, D = x.shape
        offs, xs = [b * T for b in range(B + 1)], x.reshape(B * T, D)
    elif x.dim() == 2:
        D = x.shape[1]
        offs = check_cu_seqlens(cu_seqlens, x.shape[0], 1) if cu_seqlens is not None else [0, x.shape[0]]
        xs = x
    else:
        raise ValueError(f"x: must be [T, D] or [B, T, D], got shape {tuple(x.shape)}")
    N = len(offs) - 1
    W = _check_weight(weight, D)
    if conv_state is not None:
        _check_state(conv_state, N, D, W)
    if has_initial_state is not None and has_initial_state.shape != (N,):
        raise ValueError(f"has_initial_state: must be [N={N}], got {tuple(has_initial_state.shape)}")
    return xs, offs, W


def _taps(full: torch.Tensor, w: torch.Tensor, M: int) -> torch.Tensor:
    """``z[r] = sum_i w[i] * full[r + i]`` for ``r < M`` along ``full``'s second-last dimension (``w [W, D]``)."""
    W = w.shape[0]
    z = full[..., W - 1:W - 1 + M, :] * w[W - 1]
    for i in range(W - 1):
        z.addcmul_(full[..., i:i + M, :], w[i])
    return z


def _taps_behind(x: torch.Tensor, h: torch.Tensor, w: torch.Tensor):
    """:func:`_taps` of ``x [N, L, D]`` each behind its history ``h [N, W-1, D]``, without copying them into one
    tensor (tap ``i`` reads the token ``s = W-1-i`` back: in ``x`` for rows ``t >= s``, in ``h`` for the first
    ``s``), and each sequence's last ``W-1`` inputs, the history's included when ``L < W-1``: ``(y [N, L, D],
    new_state [N, D, W-1])``."""
    W, L = w.shape[0], x.shape[1]
    tail = torch.cat([h, x[:, max(0, L - (W - 1)):]], dim=1)  # [N, <= 2(W-1), D]
    new_state = tail[:, tail.shape[1] - (W - 1):].transpose(1, 2)
    y = x * w[W - 1]
    for i in range(W - 1):
        s = W - 1 - i
        if L > s:
            y[:, s:].addcmul_(x[:, :L - s], w[i])
        m = min(s, L)
        y[:, :m].addcmul_(h[:, i:i + m], w[i])  # row t < s reads history row W-1-s+t = i+t
    return y, new_state


def _with_history(x: torch.Tensor, hist: torch.Tensor, offs: list[int]):
    """Pack every sequence of ``x [T, D]`` (``offs``: its ``cu_seqlens``) after its ``W - 1`` inputs of history
    ``hist [N, D, W-1]``: ``full [T + N(W-1), D]``, the row of each token in it ``[T]``, and the row after
    each sequence's last token ``[N]``. One shifted multiply-add over ``full`` then convolves every sequence."""
    N, D, Wm1 = hist.shape
    dev = x.device
    lens = torch.tensor(offs, device=dev).diff()  # [N]
    seq = torch.repeat_interleave(torch.arange(N, device=dev), lens)  # [T] the sequence of each token
    tok_rows = torch.arange(x.shape[0], device=dev) + Wm1 * (seq + 1)
    starts = torch.tensor(offs[:-1], device=dev) + Wm1 * torch.arange(N, device=dev)  # each history's first row
    full = torch.empty(x.shape[0] + N * Wm1, D, dtype=x.dtype, device=dev)
    full.index_copy_(0, (starts.unsqueeze(1) + torch.arange(Wm1, device=dev)).flatten(),
                     hist.transpose(1, 2).reshape(N * Wm1, D))
    full.index_copy_(0, tok_rows, x)
    return full, tok_rows, starts + Wm1 + lens


def causal_conv1d_update(
    x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, activation: str | None = "silu"
):
    """One decode step for N sequences: ``x: [N, D]``, ``conv_state: [N, D, W-1]``.

    Returns ``(y [N, D], new_conv_state [N, D, W-1])``; the input state is not modified.
    """
    if activation not in ("silu", None):
        raise ValueError(f"activation: must be 'silu' or None, got {activation!r}")
    if x.dim() != 2:
        raise ValueError(f"x: must be [N, D], got shape {tuple(x.shape)}")
    N, D = x.shape
    W = _check_weight(weight, D)
    _check_state(conv_state, N, D, W)
    dt = torch.float64 if x.dtype == torch.float64 else torch.float32
    window = torch.cat([conv_state.to(dt), x.to(dt).unsqueeze(-1)], dim=-1)  # [N, D, W]
    y = (window * weight.to(dt)).sum(-1)
    if activation == "silu":
        y = F.silu(y)
    return y.to(x.dtype), window[:, :, 1:].to(conv_state.dtype)


def causal_conv1d_update_(
    x: torch.Tensor, conv_pool: torch.Tensor, state_indices: torch.Tensor, weight: torch.Tensor,
    slot_range: tuple[int, int] | None = None, pad: bool = False,
) -> torch.Tensor:
    """The decode conv, :func:`causal_conv1d_update` (SiLU), reading and writing the conv states of a pool in place.

    ``x [N, D]``, ``conv_pool [P, D, W-1]`` (slot ``state_indices[n]`` is sequence n's window),
    ``weight [D, W]``; returns ``y [N, D]``. ``slot_range = (start, N)``: ``state_indices`` is
    ``start .. start + N - 1`` (updated through a view). SGLang / vLLM ``causal_conv1d_update(x, conv_state,
    weight, activation, conv_state_indices=...)``. No input validation (the model's decode step; tested
    against :func:`causal_conv1d_update`). fp32 / fp64 ``x`` (the pool may be narrower). ``pad=True``:
    ``PAD_SLOT_ID`` rows read a zero window, write nothing and output zeros (:mod:`kda_ref.ops.pad_rows`).
    Why this form: ``docs/kda.md#gates-norms-and-the-short-convolution``.
    """
    N, D = x.shape
    W = weight.shape[1]
    if pad:
        state = gather_rows(conv_pool, state_indices)  # [N, D, W-1], PAD rows zero
    elif slot_range is not None:
        state = conv_pool.narrow(0, slot_range[0], slot_range[1])  # [N, D, W-1], a view of the pool
    else:
        state = conv_pool.index_select(0, state_indices)  # [N, D, W-1], a copy, written back below
    # y = SiLU( w[:, W-1] * x + sum_i w[:, i] * state[:, :, i] )
    y = x * weight[:, W - 1]
    for i in range(W - 1):
        y.addcmul_(state[:, :, i], weight[:, i])
    if W > 1:
        # the window slides by one: new state = (state[:, :, 1:] | x). Shifting the flattened
        # [N, D * (W-1)] block left by one element moves every state[:, d, i+1] to state[:, d, i];
        # column W-2 then receives the next channel's oldest input, which x overwrites.
        flat = state.view(N, D * (W - 1))
        flat[:, :-1] = flat[:, 1:].clone()
        state[:, :, W - 2] = x
        if pad or slot_range is None:  # else the state is a view of the pool: already written
            write_rows(conv_pool, state_indices, state, pad)
    y = F.silu(y)
    if pad:  # a PAD row's output is zero, not whatever its token made of a zero window (as SGLang PR #30974 proposed; closed unmerged)
        y.masked_fill_((state_indices < 0)[:, None], 0.0)
    return y
