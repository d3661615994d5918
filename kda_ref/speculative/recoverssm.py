"""RecoverSSM: keep each draft token's correction, rebuild the accepted state in closed form.

Article concept ``spec.recoverssm`` (the speculative-decoding row of ``docs/article.md#s0``; K3's KDA
layer, ``#s6-2``). vLLM's for Kimi K3 (PR #51855, ``vllm/models/kimi_k3/nvidia/ops/recoverssm.py``, commit
``055e47c2``: ``_kda_recoverssm_verify_kernel``, ``_commit_kda_state_kernel``, ``_compact_conv_state_kernel``).
The verify stores ``u_t = beta_t (v_t - (Diag(alpha_t) S_{t-1})^T k_t)``; the commit sums
``S_n = Diag(prod_{t<=n} alpha_t) S_0 + sum_{t<=n} Diag(prod_{t<s<=n} alpha_s) k_t u_t^T``, no serial replay.
Design notes: ``docs/spec_decode.md#recoverssm`` and ``docs/spec_decode.md#one-step``.
"""

from __future__ import annotations

import torch

from ..model.verify_record import KEEP_CORRECTIONS
from .strategy import RollbackStrategy, commit_recomputed, trajectory_bytes


def _records(state: torch.Tensor, k: torch.Tensor, g: torch.Tensor, u: torch.Tensor):
    """``(k, u, c)`` in ``state``'s dtype, keys repeated per value head (grouped value heads: value head
    ``hv`` reads key head ``hv // group``), ``c [..., L, HV, K]`` the log decay from the start through each
    token. The records are ``[..., L, heads, dim]``: one request's (``[L, ...]``) or ``N`` rows' (``[N, L, ...]``)."""
    HV, dt = u.shape[-2], state.dtype
    if k.shape[-2] != HV:
        k = k.repeat_interleave(HV // k.shape[-2], dim=-2)
    k, g, u = (t.to(dt) for t in (k, g, u))
    return k, u, g.cumsum(-3)


def _decayed_keys(k: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``[L, HV, K]``: key ``k_t`` scaled by the decay after token ``t`` through the last one."""
    return (c[-1] - c).exp() * k


def _every_step(state: torch.Tensor, k: torch.Tensor, u: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Every ``S_j``, ``[..., L, HV, K, V]``, from ``state [..., HV, K, V]`` and the records of :func:`_records`."""
    L = k.shape[-3]
    gap = c.unsqueeze(-3) - c.unsqueeze(-4)  # [..., j, t, HV, K]: log decay from after token t to after token j
    causal = torch.ones(L, L, dtype=torch.bool, device=k.device).tril()[:, :, None, None]  # t counts for S_j if t <= j
    after = gap.masked_fill(~causal, float("-inf")).exp() * k.unsqueeze(-4)  # [..., j, t, HV, K]
    return c.exp().unsqueeze(-1) * state.unsqueeze(-4) + torch.einsum("...jthk,...thv->...jhkv", after, u)


def recover(state: torch.Tensor, k: torch.Tensor, g: torch.Tensor, u: torch.Tensor,
            all_steps: bool = False) -> torch.Tensor:
    """The state after ``L`` tokens in closed form, from ``state [HV, K, V]`` and the tokens' records:
    ``k [L, H, K]`` l2-normalised keys, ``g [L, HV, K]`` log decays, ``u [L, HV, V]`` corrections.

    With ``c_j = g_1 + ... + g_j`` (the log decay from the start through token ``j``),
    ``S_j = Diag(exp c_j) S_0 + sum_{t<=j} Diag(exp(c_j - c_t)) k_t u_t^T``. Returns ``S_L [HV, K, V]``,
    or with ``all_steps`` every ``S_j`` ``[L, HV, K, V]``; in ``state``'s dtype."""
    k, u, c = _records(state, k, g, u)
    if all_steps:
        return _every_step(state, k, u, c)
    return c[-1].exp().unsqueeze(-1) * state + torch.einsum("thk,thv->hkv", _decayed_keys(k, c), u)


def recover_kept(state: torch.Tensor, k: torch.Tensor, g: torch.Tensor, u: torch.Tensor,
                 kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed-shape closed form of ``N`` rows (a static verify step's commit, as
    :func:`kda_ref.speculative.replay.fold_kept` is ReplaySSM's): ``state [N, HV, K, V]``, the rows' ``L``
    records (``k [N, L, H, K]``, ``g [N, L, HV, K]``, ``u [N, L, HV, V]``) and ``kept [N]`` (int64,
    ``0 .. L``). Returns ``(the state after each row's first kept[n] records [N, HV, K, V] -- the committed
    state where kept is 0, the states after every record [N, L, HV, K, V])``: one masked sum per row, no
    host synchronisation, no data-dependent shape (the kept count selects by an index tensor)."""
    steps = _every_step(state, *_records(state, k, g, u))
    every = torch.cat([state[:, None], steps], dim=1)  # [N, 1 + L, ...]: after 0 .. L records
    return every[torch.arange(state.shape[0], device=u.device), kept], steps


def closed_form_terms(state: torch.Tensor, k: torch.Tensor, g: torch.Tensor,
                      u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The closed form's pieces after ``L`` kept tokens (arguments as :func:`recover`): ``(the committed
    state decayed through every kept token [HV, K, V], each token's term Diag(prod_{s>t} alpha_s) k_t u_t^T
    [L, HV, K, V])``; their sum is :func:`recover`'s state (the page draws them one by one)."""
    k, u, c = _records(state, k, g, u)
    return c[-1].exp().unsqueeze(-1) * state, _decayed_keys(k, c).unsqueeze(-1) * u.unsqueeze(-2)


def correction_record_bytes(cfg, key_bytes: int = 4, conv_bytes: int = 4) -> int:
    """RecoverSSM's record of one token, all KDA layers: the conv input (``q | k | v`` projections, ``3 H K``
    numbers of ``conv_bytes``), ``k`` and ``g`` (``H x K`` each, ``key_bytes``) and ``u`` (``H x V``, fp32;
    ``V = K``). The defaults are this engine's record (fp32 throughout); vLLM keeps the key and the raw gate
    in the activation dtype and the conv inputs as ``k`` extra bf16 columns of the conv state
    (``key_bytes = conv_bytes = 2``)."""
    H, K, n = cfg.linear_num_heads, cfg.linear_head_dim, len(cfg.kda_layer_ids)
    return n * H * K * (3 * conv_bytes + 2 * key_bytes + 4)


def _closed_form(state, tr, rows):
    """The states after each of a request's kept tokens, summed from their records (:func:`recover`)."""
    return recover(state, tr.k[rows], tr.g[rows], tr.u[rows], all_steps=True)


class RecoverSSM(RollbackStrategy):
    name = "recoverssm"
    record = KEEP_CORRECTIONS

    def commit(self, pool, out, kept, requests):
        # after a static verify step the step output's fold is this closed form in fixed shapes (recover_kept)
        return commit_recomputed(pool, out, kept, {n: requests[n].slot for n in kept}, _closed_form)

    def rollback_bytes(self, pool, out, verified, running):
        return trajectory_bytes(out, verified)  # corrections, keys, gates and conv inputs; no states

    def request_bytes(self, cfg, k, state_bytes):
        return (1 + k) * correction_record_bytes(cfg)
