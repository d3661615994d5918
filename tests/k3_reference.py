"""A float64 Kimi K3 text model written from the published definitions, independent of ``kda_ref.model``.

It reads a state dict by the release's tensor names (without ``language_model.``; MXFP4 experts already
dequantised) and follows the upstream pseudo-code step by step: Moonshot's ``modeling_kimi_linear.py``
(``KimiDeltaAttention``, ``KimiMLAAttention``, ``SituAndMul``, ``KimiSparseMoeBlock``,
``KimiDecoderLayer._forward_attn_residual`` / ``_apply_attn_res``), vLLM ``vllm/models/kimi_k3/nvidia``
(``kda.py``, ``mla.py``, ``model.py``, ``mtp.py``, ``ops/attn_res.py``). Its KDA recurrence keeps the
state as vLLM's K3 kernels do, ``[V, K]`` per head, one token at a time -- the model under test keeps
``[K, V]`` (fla's layout) and runs chunks, so agreeing is a check of both the math and the layout.
Nothing here is imported from the package; it is slow and meant for a few dozen tokens.
"""

from __future__ import annotations

import torch

F64 = torch.float64


def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def situ(gate, up, beta, linear_beta):
    a = beta * torch.tanh(gate / beta) * torch.sigmoid(gate)
    if linear_beta is not None:
        up = linear_beta * torch.tanh(up / linear_beta)
    return a * up


class K3Reference:
    def __init__(self, config, state: dict[str, torch.Tensor]):
        self.c = config
        self.w = {k: v.to(F64) for k, v in state.items()}
        self.eps = config.rms_norm_eps

    def W(self, name):
        return self.w[name]

    # ---- the layers ----------------------------------------------------------------------------------
    def kda(self, p, x, state=None):
        """``x [T, d]`` (normed) -> ``([T, d], final state [H, V, K])``; ``state``: the state before."""
        c, T = self.c, x.shape[0]
        H, K = c.linear_num_heads, c.linear_head_dim
        Wc = c.short_conv_kernel_size

        def conv(name, y):
            w = self.W(f"{p}.{name}.weight")[:, 0, :]  # [C, W]
            pad = torch.cat([torch.zeros(Wc - 1, y.shape[1], dtype=F64), y])
            out = torch.stack([sum(w[:, i] * pad[t + i] for i in range(Wc)) for t in range(T)])
            return torch.nn.functional.silu(out)

        q = conv("q_conv1d", x @ self.W(f"{p}.q_proj.weight").T).view(T, H, K)
        k = conv("k_conv1d", x @ self.W(f"{p}.k_proj.weight").T).view(T, H, K)
        v = conv("v_conv1d", x @ self.W(f"{p}.v_proj.weight").T).view(T, H, K)
        g_raw = (x @ self.W(f"{p}.f_a_proj.weight").T @ self.W(f"{p}.f_b_proj.weight").T).view(T, H, K)
        a = self.W(f"{p}.A_log").reshape(-1)[:H].exp()  # A_log as shipped: [K], the first H used, one per head
        dt = self.W(f"{p}.dt_bias").view(H, K)
        if c.gate_lower_bound is not None:  # K3's bounded gate, in (lb, 0)
            g = c.gate_lower_bound * torch.sigmoid(a[:, None] * (g_raw + dt))  # [T, H, K]
        else:  # Kimi-Linear's: -exp(A_log) * softplus(f + dt_bias)
            g = -a[:, None] * torch.nn.functional.softplus(g_raw + dt)
        beta = torch.sigmoid(x @ self.W(f"{p}.b_proj.weight").T)  # [T, H]
        q = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        S = torch.zeros(H, K, K, dtype=F64) if state is None else state.clone()  # [H, V, K]
        o = torch.zeros(T, H, K, dtype=F64)
        for t in range(T):
            for h in range(H):
                S[h] = S[h] * g[t, h].exp()[None, :]  # decay each key channel
                u = beta[t, h] * (v[t, h] - S[h] @ k[t, h])  # [V]
                S[h] = S[h] + u[:, None] * k[t, h][None, :]
                o[t, h] = S[h] @ (K ** -0.5 * q[t, h])
        gate = (x @ self.W(f"{p}.g_proj.weight").T).view(T, H, K)
        o = rms(o, self.W(f"{p}.o_norm.weight"), self.eps) * torch.sigmoid(gate)
        return o.reshape(T, H * K) @ self.W(f"{p}.o_proj.weight").T, S

    def mla(self, p, x):
        c, T = self.c, x.shape[0]
        h, nope, pe, vd, lat = (c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim,
                                c.kv_lora_rank)
        cq = rms(x @ self.W(f"{p}.q_a_proj.weight").T, self.W(f"{p}.q_a_layernorm.weight"), self.eps)
        q = (cq @ self.W(f"{p}.q_b_proj.weight").T).view(T, h, nope + pe)
        ckv = x @ self.W(f"{p}.kv_a_proj_with_mqa.weight").T
        lat_c = rms(ckv[:, :lat], self.W(f"{p}.kv_a_layernorm.weight"), self.eps)
        kv = (lat_c @ self.W(f"{p}.kv_b_proj.weight").T).view(T, h, nope + vd)
        key = torch.cat([kv[..., :nope], ckv[:, None, lat:].expand(T, h, pe)], -1)  # shared k_pe, no RoPE
        val = kv[..., nope:]
        scores = torch.einsum("thd,shd->hts", q, key) * (nope + pe) ** -0.5
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        o = torch.einsum("hts,shv->thv", scores.softmax(-1), val).reshape(T, h * vd)
        o = o * torch.sigmoid(x @ self.W(f"{p}.g_proj.weight").T)
        return o @ self.W(f"{p}.o_proj.weight").T

    def mlp(self, p, x, gate="gate_proj", up="up_proj", down="down_proj"):
        c = self.c
        a = situ(x @ self.W(f"{p}.{gate}.weight").T, x @ self.W(f"{p}.{up}.weight").T, c.activation_situ_beta,
                 c.activation_situ_linear_beta)
        return a @ self.W(f"{p}.{down}.weight").T

    def moe(self, p, x):
        c = self.c
        s = torch.sigmoid(x @ self.W(f"{p}.gate.weight").T)  # [T, E]
        idx = (s + self.W(f"{p}.gate.e_score_correction_bias")).topk(c.num_experts_per_token, -1).indices
        w = s.gather(1, idx)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * c.routed_scaling_factor
        z = x @ self.W(f"{p}.routed_expert_down_proj.weight").T
        y = torch.zeros_like(z)
        for t in range(x.shape[0]):
            for j in range(idx.shape[1]):
                e = int(idx[t, j])
                y[t] += w[t, j] * self.mlp(f"{p}.experts.{e}", z[t:t + 1], "w1", "w3", "w2")[0]
        y = rms(y, self.W(f"{p}.routed_expert_norm.weight"), self.eps) @ self.W(f"{p}.routed_expert_up_proj.weight").T
        return y + self.mlp(f"{p}.shared_experts", x)

    # ---- the block and the model ----------------------------------------------------------------------
    def mix(self, partial, blocks, proj, norm):
        v = torch.stack([*blocks, partial])  # [n + 1, T, d], the running sum last
        kk = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + self.eps)
        p = torch.softmax((kk * (self.W(norm) * self.W(proj)[0])).sum(-1), 0)
        return (p[..., None] * v).sum(0)

    def layer(self, i, partial, blocks):
        p, c = f"model.layers.{i}", self.c
        hs = partial if not blocks else self.mix(partial, blocks, f"{p}.self_attention_res_proj.weight",
                                                  f"{p}.self_attention_res_norm.weight")
        if i % c.attn_res_block_size == 0:
            blocks, partial = blocks + [partial], None
        h = rms(hs, self.W(f"{p}.input_layernorm.weight"), self.eps)
        a = self.kda(f"{p}.self_attn", h)[0] if (i + 1) in c.kda_layers else self.mla(f"{p}.self_attn", h)
        partial = a if partial is None else partial + a
        hs = self.mix(partial, blocks, f"{p}.mlp_res_proj.weight", f"{p}.mlp_res_norm.weight")
        h = rms(hs, self.W(f"{p}.post_attention_layernorm.weight"), self.eps)
        m = self.mlp(f"{p}.mlp", h) if i < c.first_k_dense_replace else self.moe(f"{p}.block_sparse_moe", h)
        return partial + m, blocks

    def hidden(self, ids):
        partial, blocks = self.W("model.embed_tokens.weight")[torch.as_tensor(ids)], []
        for i in range(self.c.num_hidden_layers):
            partial, blocks = self.layer(i, partial, blocks)
        return self.mix(partial, blocks, "model.output_attn_res_proj.weight", "model.output_attn_res_norm.weight")

    def logits(self, ids):
        return rms(self.hidden(ids), self.W("model.norm.weight"), self.eps) @ self.W("lm_head.weight").T

    def mtp_logits(self, ids):
        """MTP layer 0 at positions ``0 .. T-2``: from the main model's hidden state at ``t`` and the token at
        ``t + 1``, the logits of the token at ``t + 2`` (a plain residual inside the MTP layer)."""
        c, p = self.c, f"model.layers.{self.c.num_hidden_layers}"
        h = self.hidden(ids)[:-1]
        e = self.W(f"{p}.embed_tokens.weight")[torch.as_tensor(ids[1:])]
        x = torch.cat([rms(e, self.W(f"{p}.enorm.weight"), self.eps), rms(h, self.W(f"{p}.hnorm.weight"), self.eps)], -1)
        x = x @ self.W(f"{p}.eh_proj.weight").T
        x = x + self.mla(f"{p}.self_attn", rms(x, self.W(f"{p}.input_layernorm.weight"), self.eps))
        hs = rms(x, self.W(f"{p}.post_attention_layernorm.weight"), self.eps)
        x = x + (self.moe(f"{p}.block_sparse_moe", hs) if c.num_experts else self.mlp(f"{p}.mlp", hs))
        return rms(x, self.W(f"{p}.shared_head.norm.weight"), self.eps) @ self.W(f"{p}.shared_head.head.weight").T
