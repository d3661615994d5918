"""KDA recurrent form: the readable, token-by-token reference.

Article concept: the KDA recurrence (section 1.1 / 2.1 of the article, ``kda.recurrence``).
Per value head, with a column-vector convention and state ``S in R^{K x V}``:

    S_t = (I - beta_t k_t k_t^T) Diag(alpha_t) S_{t-1} + beta_t k_t v_t^T,   alpha_t = exp(g_t)
    o_t = S_t^T (scale * q_t)                                                 (read AFTER the update)

Written as the delta rule:  S <- Diag(alpha_t) S;  S <- S + beta_t k_t (v_t - S^T k_t)^T.

Semantics match flash-linear-attention ``fla/ops/kda/naive.py::naive_recurrent_kda`` (layouts,
default ``scale = K ** -0.5``, grouped value heads through ``repeat_interleave``), and it adds
``cu_seqlens`` varlen packing the way fla's fused kernels accept it. SGLang and vLLM run the decode
phase with the fused version of this loop (fla ``fused_recurrent_kda``; SGLang
``KDAKernelDispatcher`` decode path, vLLM ``vllm/model_executor/layers/kda.py``).
"""

from __future__ import annotations

import torch

from ._checks import check_kda_inputs, compute_dtype, seq_offsets


def recurrent_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    cu_seqlens: torch.Tensor | None = None,
    return_step_states: bool = False,
):
    """Token-by-token KDA.

    Args:
        q, k: ``[B, T, H, K]`` (not normalised here: apply :func:`kda_ref.ops.l2norm` first).
        v: ``[B, T, HV, V]``; g: ``[B, T, HV, K]`` log decay; beta: ``[B, T, HV]`` post-sigmoid.
        scale: query scale, default ``K ** -0.5``.
        initial_state: ``[N, HV, K, V]`` float32 (N = B, or N = len(cu_seqlens) - 1). Not modified.
        output_final_state: also return the state after the last token of every sequence.
        cu_seqlens: ``[N + 1]`` int offsets of packed sequences (requires ``B == 1``).
        return_step_states: also return the state after every token, ``[B, T, HV, K, V]``
            (used by speculative verification to roll back to any accepted position).

    Returns:
        ``(o, final_state)`` with ``o: [B, T, HV, V]`` in ``v.dtype`` and ``final_state:
        [N, HV, K, V]`` float32 (float64 for float64 inputs) or ``None``; with
        ``return_step_states`` a third element, the per-token states.
    """
    shapes, offs = check_kda_inputs(q, k, v, g, beta, initial_state, cu_seqlens)
    B, T, H, HV, K, V = shapes.B, shapes.T, shapes.H, shapes.HV, shapes.K, shapes.V
    scale = K**-0.5 if scale is None else scale
    dt = compute_dtype(q, k, v, g, beta, initial_state)
    group = HV // H
    # [B, T, H, K] -> [B, T, HV, K]: value head hv reads query/key head hv // group
    qf = q.to(dt).repeat_interleave(group, dim=2) * scale
    kf = k.to(dt).repeat_interleave(group, dim=2)
    vf, gf, bf = v.to(dt), g.to(dt), beta.to(dt)

    o = torch.zeros(B, T, HV, V, dtype=dt, device=v.device)
    finals = []
    steps = torch.zeros(B, T, HV, K, V, dtype=dt, device=v.device) if return_step_states else None
    for n, (b, start, end) in enumerate(seq_offsets(shapes, offs)):
        S = torch.zeros(HV, K, V, dtype=dt, device=v.device)
        if initial_state is not None:
            S = S + initial_state[n].to(dt)
        for t in range(start, end):
            k_t = kf[b, t]  # [HV, K]
            S = S * gf[b, t].exp()[..., None]  # Diag(alpha_t) S
            v_old = torch.einsum("hk,hkv->hv", k_t, S)  # S^T k_t: what the state recalls for k_t
            S = S + torch.einsum("hk,hv->hkv", bf[b, t, :, None] * k_t, vf[b, t] - v_old)  # erase + write
            o[b, t] = torch.einsum("hk,hkv->hv", qf[b, t], S)
            if steps is not None:
                steps[b, t] = S
        finals.append(S)
    final_state = torch.stack(finals) if output_final_state else None
    if return_step_states:
        return o.to(v.dtype), final_state, steps
    return o.to(v.dtype), final_state
