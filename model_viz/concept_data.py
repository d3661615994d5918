"""The concept map's data: every idea of the article, where it lives here and upstream.

Every located pointer names the repository and the commit its file was read at (checked against the
stored copies of sgl-project/sglang, vllm-project/vllm and fla-org/flash-linear-attention in
2026-12). Where the stored upstream copy of a file was too old to hold a symbol, the pointer names
the fork whose copy was read (``repo``): those forks carry upstream's file, but only the fork's
commit was checked. Pointers that could not be confirmed are ``NOT_LOCATED`` with the reason.
Article sections refer to ``docs/article.md``.
"""

from __future__ import annotations

from .concept_types import NOT_LOCATED, Concept, SourceRef

_SG, _VL, _FLA = "sgl-project/sglang", "vllm-project/vllm", "fla-org/flash-linear-attention"


def sg(path: str, symbol: str, commit: str, detail: str = "", repo: str = _SG) -> SourceRef:
    return SourceRef(f"python/sglang/srt/{path}", symbol, detail=detail, repo=repo, commit=commit)


def vl(path: str, symbol: str, commit: str, detail: str = "", repo: str = _VL) -> SourceRef:
    return SourceRef(f"vllm/{path}", symbol, detail=detail, repo=repo, commit=commit)


def fla(path: str, symbol: str, commit: str, detail: str = "") -> SourceRef:
    return SourceRef(f"fla/ops/{path}", symbol, detail=detail, repo=_FLA, commit=commit)


def missing(symbol: str, why: str) -> SourceRef:
    return SourceRef(NOT_LOCATED, symbol, note=why)


# files and commits read (see the module docstring)
_KDA_TRITON, _C_TRITON = "layers/attention/linear/kernels/kda_triton.py", "007d1d93beabe99478bc855e6ccdc4ac0bfcdf7d"
_KDA_BACKEND, _C_BACKEND = "layers/attention/linear/kda_backend.py", "0051ebfc71dfdc30489fba79fe2b53e8bc014909"
_HYB, _C_HYB = "layers/attention/hybrid_linear_attn_backend.py", "012945ecee437fd359c8e5465690cd1fc6efbf1e"
_KIMI, _C_KIMI = "models/kimi_linear.py", "0220422fc0009bb4316f8a540e777d85dce156f3"
_MRC, _C_MRC = "mem_cache/mamba_radix_cache.py", "c1eb00f9a08b4985ea1d36b184c6a3d71a6463bf"
_POOL = "mem_cache/memory_pool.py"
_FORK_YZ, _C_YZ = "yizhang2077/sglang", "38adba0256956e33ac30883a7aa32bc20a74f8e5"  # MambaRadixCache's author's fork
_FORK_BBUF, _C_BBUF = "BBuf/sglang", "c73eb7a8f7695e0fc1dab1017c9f2b56d0298db6"
_VKDA, _C_VKDA = "model_executor/layers/kda.py", "01a7e5d91d42e6232d746d12f898a590f1ee77f9"
_VSTKV, _C_VSTKV = "v1/core/single_type_kv_cache_manager.py", "00b08dc44519a82cbdd9061d92d1226985094622"
_VKVIF, _C_VKVIF = "v1/kv_cache_interface.py", "001cabc1be16a59a70d720ed61a13b678c060a18"
_VSCHED, _C_VSCHED = "v1/core/sched/scheduler.py", "00024d314514900f361ad072af6931e403b7f589"


def _c(id, section, title_en, title_zh, en, zh, ours, sglang, vllm, fla=None, marconi=None) -> Concept:
    return Concept(id, section, {"en": title_en, "zh": title_zh}, {"en": en, "zh": zh}, ours, sglang, vllm, fla,
                   marconi)


CONCEPT_LIST = [
    # ---- the KDA math ---------------------------------------------------------------------------------
    _c(
        "kda.recurrence", "1.1, 2.1",
        "The KDA recurrence", "KDA 递推",
        "Per head, a fixed K×V state S is updated once per token: decay every key channel by "
        "α_t = exp(g_t), then apply the delta-rule write with strength β_t; the output reads "
        "o_t = Sᵀ(scale·q_t) after the update. Decode runs exactly this, one token per step.",
        "每个头有一个固定的 K×V 状态 S，每个 token 更新一次：先按 α_t = exp(g_t) 衰减每个 key 通道，"
        "再以强度 β_t 做 delta 规则写入；输出在更新之后读取 o_t = Sᵀ(scale·q_t)。"
        "decode 阶段每步正是执行这一递推。",
        "kda_ref.ops.kda_recurrent.recurrent_kda",
        sg(_KDA_TRITON, "TritonKDAKernel.decode", _C_TRITON,
           "fused_sigmoid_gating_delta_rule_update(..., initial_state_indices=cache_indices, is_kda=True)"),
        vl(_VKDA, "KimiDeltaAttention._forward", _C_VKDA, "when num_prefills == 0: fused_recurrent_kda"),
        fla("kda/fused_recurrent.py", "fused_recurrent_kda", "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89",
            "state [N, HV, K, V]"),
    ),
    _c(
        "kda.delta_rule", "1.3, 2.2",
        "The delta rule", "Delta 规则",
        "The write is not a plain add: S first predicts a value for the key, Sᵀk_t, and only the "
        "error v_t − Sᵀk_t is written, scaled by β_t. A key that is already stored (and has not "
        "decayed away) gets a small correction instead of a second copy.",
        "写入不是简单相加：S 先对 key 给出预测 Sᵀk_t，只把误差 v_t − Sᵀk_t 乘以 β_t 写入。"
        "已经存过（且尚未衰减掉）的 key 只会得到一个小的修正，而不是再存一份。",
        "kda_ref.ops.kda_recurrent.recurrent_kda",
        sg(_KDA_TRITON, "TritonKDAKernel.decode", _C_TRITON, "the delta-rule update inside the fused kernel"),
        vl(_VKDA, "KimiDeltaAttention._forward", _C_VKDA, "fused_recurrent_kda / chunk_kda"),
        fla("kda/naive.py", "naive_recurrent_kda", "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89",
            "S = S * exp(g); S += (beta k) (v - k^T S)^T; o = q^T S after the update"),
    ),
    _c(
        "kda.gate", "1.1, 6.2",
        "Fine-grained decay gate", "细粒度衰减门",
        "KDA forgets per key channel, not per head: g = −exp(A_log)·softplus(f_b(f_a(x)) + dt_bias) "
        "is a K-vector of log decays per head and token, α = exp(g) ∈ (0, 1]. Channels with α near "
        "1 keep information for many tokens, channels with small α forget within a few.",
        "KDA 按 key 通道而不是按头遗忘：g = −exp(A_log)·softplus(f_b(f_a(x)) + dt_bias) 是每个头、"
        "每个 token 的一个 K 维对数衰减向量，α = exp(g) ∈ (0, 1]。α 接近 1 的通道能保留信息很多个 "
        "token，α 较小的通道几个 token 内就会遗忘。",
        "kda_ref.ops.gate.kda_gate",
        sg(_KIMI, "KimiDeltaAttention.forward", _C_KIMI,
           "raw forget gate f_b_proj(f_a_proj(x)); prefill passes it raw to chunk_kda with A_log and dt_bias, "
           "decode and verify kernels apply the activation internally"),
        vl(_VKDA, "KimiDeltaAttention.forward", _C_VKDA,
           "imports fused_kda_gate from .fla.ops.kda and calls g = fused_kda_gate(g, A_log, head_dim, g_bias=dt_bias)"),
        fla("kda/gate.py", "naive_kda_gate", "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89",
            "g = -exp(A_log) * softplus(g + dt_bias); fused_kda_gate is defined in the same file"),
    ),
    _c(
        "kda.state_evolution", "1.3, 2.2",
        "How the state evolves", "状态如何演化",
        "Recording S after every token shows the whole life of a KDA state: it fills from zero, "
        "settles where decay balances writing, and each step overwrites the previous one. Only "
        "positions whose state was explicitly saved can be resumed later.",
        "记录每个 token 之后的 S，可以看到 KDA 状态的完整生命周期：从零开始填充，"
        "在衰减与写入平衡处趋于稳定，而每一步都会覆盖上一步。只有显式保存过状态的位置，"
        "以后才能从那里继续。",
        "kda_ref.state_trace.trace_kda_states",
        sg(_KDA_TRITON, "TritonKDAKernel.target_verify", _C_TRITON,
           "the closest engine analogue: the state after every draft token, kept in a buffer for verification"),
        vl(_VKDA, "KimiDeltaAttention._forward", _C_VKDA, "one state per sequence, overwritten in place"),
    ),
    _c(
        "state.not_an_archive", "2.2",
        "A fixed state is not an archive", "固定状态不是完整档案",
        "From the state after t tokens nothing earlier can be read back. Running the recurrence backwards "
        "needs the very tokens that were folded in, and even with them each step divides by the decay α: "
        "channels that forgot quickly amplify rounding error by orders of magnitude per step. A cache that "
        "wants to resume at t' < t must have saved the state at t' (or recompute from an earlier one).",
        "从 t 个 token 之后的状态中读不回任何更早的内容。倒着运行递推需要当初折叠进去的那些 token 本身；即使有它们，"
        "每一步都要除以衰减 α：遗忘得快的通道会让舍入误差每一步放大几个数量级。想在 t' < t 处继续的缓存，必须当时"
        "就保存了 t' 处的状态（或从更早的状态重算）。",
        "kda_ref.state_trace.recover_backwards",
        sg(_MRC, "MambaRadixCache._split_node", _C_MRC, "new_node.mamba_value = None: a state cannot be split"),
        vl(_VSTKV, "MambaManager.get_num_skipped_tokens", "129ab7c60cbb8eb11e875373e67f7e521b74aa30",
           "mamba only needs to keep the state of the last computed token"),
    ),
    _c(
        "kda.chunk_form", "1.3",
        "Chunkwise-parallel KDA (prefill)", "分块并行的 KDA（prefill）",
        "Prefill does not loop token by token: inside a chunk of 64 tokens KDA is computed with "
        "matrix products (WY / UT transform), and only the state passes from chunk to chunk in "
        "order — split into segments, but keep the order.",
        "prefill 不逐 token 循环：在 64 个 token 的分块内用矩阵乘（WY / UT 变换）计算 KDA，"
        "只有状态按顺序在块与块之间传递——可分段，但必须保序。",
        "kda_ref.ops.kda_chunk.chunk_kda",
        sg(_KDA_TRITON, "TritonKDAKernel.extend", _C_TRITON,
           "chunk_kda(..., initial_state_indices=cache_indices, cu_seqlens=query_start_loc)"),
        vl(_VKDA, "KimiDeltaAttention._forward", _C_VKDA, "when num_prefills > 0: chunk_kda over the non-spec tokens"),
        fla("kda/chunk.py", "chunk_kda", "df21b2592becb2ccb0ab3be2e5d3acb44e8ba2ed",
            "chunk_size 64; the chunk-start states h are computed and dropped"),
    ),
    _c(
        "kda.intra_chunk", "1.3",
        "Inside a chunk: decay factorised where it can be", "块内计算：能分解处就分解衰减",
        "The intra-chunk scores need exp(G_i − G_j) per channel for every pair of positions. Split as "
        "exp(G_i + s)·exp(−s − G_j), the sum over channels becomes one matrix product, as long as both factors "
        "stay normal floats. fla cuts each 64-token chunk into 16-token sub-chunks, factorises the blocks between "
        "them around the row sub-chunk's first gate and computes the 16×16 diagonal blocks pair by pair, one GPU "
        "program per token. Here the whole chunk is one product for every channel a shift can fit (the chunk-start "
        "anchor, or a centring shift when the channel's range is under twice the float limit); only the steeper "
        "channels go through an anchored recursion, over those channels alone. On a CPU the walk also steps 32 "
        "tokens at a time, while the caches still see the states at every 64th token.",
        "块内打分需要每个通道在每对位置上的 exp(G_i − G_j)。拆成 exp(G_i + s)·exp(−s − G_j) 后，对通道求和就是一次"
        "矩阵乘，只要两个因子都还是正常浮点数。fla 把每个 64 token 的块切成 16 token 的子块，子块之间的块围绕行子块的"
        "第一个门控值分解，16×16 的对角块则逐对计算，GPU 上每个 token 一个程序。这里对所有能用平移装下的通道（块起点"
        "锚点，或当通道的取值范围小于两倍浮点上限时用居中平移），整个块就是一次矩阵乘；只有更陡的通道走锚定递归，"
        "而且只对这些通道。在 CPU 上，状态遍历还按 32 个 token 一步前进，缓存看到的仍是每 64 个 token 处的状态。",
        "kda_ref.ops.kda_chunk_blocked.chunk_kda_blocked",
        missing("SGLang's intra-chunk kernel", "SGLang calls fla's chunk_kda (kda.chunk_form); it has no intra-chunk "
                "code of its own"),
        missing("vLLM's intra-chunk kernel", "vLLM vendors fla's kernels (kda.chunk_form); none of its own"),
        fla("kda/chunk_intra.py", "chunk_kda_fwd_intra", "7f2becb808b9aaf8ec727fb29976a2214563b825",
            "BC = 16: chunk_kda_fwd_intra_token_parallel for the diagonal blocks (fp32 Akk_diag), then "
            "chunk_kda_fwd_kernel_inter_solve_fused: off-diagonal blocks anchored at g of the row sub-chunk's "
            "first token, forward substitution, merged inverse"),
    ),
    _c(
        "kda.chunk_checkpoints", "5.2, 6.8",
        "Chunk-start states as free checkpoints", "块起点状态即免费的 checkpoint",
        "The chunk kernel computes the state at the start of every chunk anyway; returning those "
        "states costs nothing extra. A cache can take the state at a chunk-aligned position inside a "
        "prefill step from them instead of ending the step there. SGLang reads exactly one per step "
        "(its tracked position); a dense cache could keep them all.",
        "分块 kernel 本来就要计算每个块起点的状态，把它们返回出来几乎没有额外代价。缓存可以从中取出 prefill 步内部"
        "某个块对齐位置的状态，而不必让这一步在那里结束。SGLang 每步恰好读取其中一个（它跟踪的位置）；稠密的缓存则"
        "可以全部保留。",
        "kda_ref.ops.kda_chunk.chunk_kda",
        sg(_HYB, "MambaAttnBackendBase._init_track_ssm_indices", _C_HYB,
           "an unaligned tracked length reads h[offset + len // chunk], an aligned one the final state"),
        missing("chunk-start states",
                "vLLM does not read the chunk kernel's chunk-start states; its align mode ends scheduler steps on "
                "block boundaries instead (MambaPrefillChunkAlignmentPolicy)"),
    ),
    # ---- the three kinds of state ------------------------------------------------------------------------
    _c(
        "state.conv", "1.2, 6.5",
        "Short-convolution state", "短卷积状态",
        "Before KDA, q, k and v pass a causal depthwise convolution of width 4. To continue a "
        "sequence the layer must keep the last 3 inputs: a second, small state per KDA layer that "
        "must describe exactly the same token boundary as the recurrent state.",
        "在进入 KDA 之前，q、k、v 先经过宽度为 4 的因果逐通道卷积。要继续一个序列，该层必须保存最近 "
        "3 个输入：这是每个 KDA 层的第二个（较小的）状态，它必须与递推状态对应完全相同的 token 边界。",
        "kda_ref.ops.short_conv.causal_conv1d",
        sg(_KDA_BACKEND, "KDAAttnBackend.forward_extend", _C_BACKEND,
           "causal_conv1d_fn on conv_states with has_initial_state = extend_prefix_lens > 0; forward_decode uses "
           "causal_conv1d_update"),
        vl(_VKDA, "KimiDeltaAttention._forward", _C_VKDA,
           "conv_state_q / conv_state_k / conv_state_v (newer trees fuse them into one conv_state)"),
    ),
    _c(
        "state.mla_kv", "1.2",
        "MLA latent KV cache", "MLA 潜在 KV 缓存",
        "An MLA layer caches one latent row [c_kv | k_pe] per token (576 values in the 48B model), "
        "shared by all heads. Unlike KDA's state it grows with the sequence, and any prefix of it "
        "is a valid cache for that prefix.",
        "MLA 层为每个 token 缓存一行潜在向量 [c_kv | k_pe]（48B 模型中为 576 个值），由所有头共享。"
        "与 KDA 的状态不同，它随序列增长，而且它的任意前缀都是对应前缀的有效缓存。",
        "kda_ref.model.mla_layer.MLAAttention",
        sg(_POOL, "MLATokenToKVPool", "14c3feee2390a7b5a06accc7af651bde8c5211c6",
           "kv_buffer per layer: (size + 1, 1, kv_lora_rank + qk_rope_head_dim)"),
        vl(_VKVIF, "MLAAttentionSpec", _C_VKVIF, "one latent row per token per layer"),
    ),
    _c(
        "state.three_kinds", "1.2, 4.1",
        "Three kinds of cached state", "三种缓存状态",
        "A request of a hybrid model owns three kinds of state: per-token MLA KV rows, and per KDA "
        "layer a fixed recurrent state plus a short-conv window. The cache stops being one kind of "
        "page; pools, prefix caches and transfers must handle all three together.",
        "混合模型的一个请求拥有三种状态：按 token 存储的 MLA KV 行，以及每个 KDA 层的固定递推状态和"
        "短卷积窗口。缓存不再只有一种页面；内存池、前缀缓存和传输都必须同时处理这三种。",
        "kda_ref.model.layer_state.HybridCacheTensors",
        sg(_POOL, "HybridReqToTokenPool", _C_YZ,
           "its MambaPool holds conv + temporal state; HybridLinearKVPool the full-attention (MLA) KV", repo=_FORK_YZ),
        vl(_VKVIF, "MambaSpec", _C_VKVIF,
           "beside MLAAttentionSpec; layers of one spec are grouped into equal-size KV cache groups"),
    ),
    _c(
        "state.bytes", "1.2, 2.1",
        "State size arithmetic", "状态大小的算术",
        "A KDA layer's state costs the same for 10 tokens and for 1M tokens: H·K·V fp32 values plus "
        "the conv window. In Kimi-Linear-48B that is about 2 MiB per layer per sequence, as much as "
        "one MLA layer's KV for about 1,900 tokens.",
        "KDA 层的状态对 10 个 token 和 100 万个 token 的开销相同：H·K·V 个 fp32 值加上卷积窗口。"
        "在 Kimi-Linear-48B 中约为每层每序列 2 MiB，相当于一个 MLA 层约 1900 个 token 的 KV。",
        "kda_ref.model.config.ModelConfig.state_bytes",
        sg("configs/mamba_utils.py", "BaseLinearStateParams.mamba_cache_per_req",
           "23c5f521bb22ea36d3ed2ecc3af227b9e3fe09fd",
           "(conv + temporal bytes) x layers; KimiLinearCacheParams supplies the KDA shapes", repo="ByronHsu/sglang"),
        vl("model_executor/layers/mamba/mamba_utils.py", "MambaStateShapeCalculator.kda_state_shape",
           "02d710837549a368073552333f66d714477415d2", "(conv_state_shape, (heads, head_dim, head_dim)); "
           "MambaSpec.page_size_bytes sums them"),
    ),
    # ---- the execution chain -----------------------------------------------------------------------------
    _c(
        "chain.hybrid", "1.1",
        "The hybrid execution chain", "混合注意力的执行链",
        "Tokens → embedding → per layer: RMSNorm → (KDA or MLA) → residual → RMSNorm → (dense MLP or "
        "MoE) → residual → final norm → LM head. Kimi-Linear-48B has 20 KDA and 7 MLA layers: three KDA "
        "layers then one MLA layer, the last block two KDA and one MLA.",
        "token → 嵌入 → 每层：RMSNorm →（KDA 或 MLA）→ 残差 → RMSNorm →（稠密 MLP 或 MoE）→ 残差 → "
        "最终归一化 → LM head。Kimi-Linear-48B 有 20 个 KDA 层和 7 个 MLA 层：三个 KDA 层接一个 MLA 层，"
        "最后一组是两个 KDA 层接一个 MLA 层。",
        "kda_ref.model.model.HybridModel",
        sg(_KIMI, "KimiDecoderLayer", _C_KIMI, "KimiDeltaAttention if config.is_kda_layer(i), else KimiMLAAttention"),
        vl("model_executor/models/kimi_linear.py", "KimiDecoderLayer", "01d995867291dd13119ea66cd18e3c9c9b51c50e",
           "the same is_kda_layer switch"),
    ),
    _c(
        "varlen.metadata", "0, 8.3",
        "Varlen batch metadata", "变长批次元数据",
        "A batch packs the new tokens of many sequences into one row described by cu_seqlens; each "
        "sequence finds its own state slot through state indices, and has_initial_state says "
        "whether it starts from a cached state or from zero.",
        "一个批次把多个序列的新 token 打包成一行，用 cu_seqlens 描述边界；每个序列通过状态索引找到自己的"
        "状态槽位，has_initial_state 表示它是从缓存的状态开始还是从零开始。",
        "kda_ref.model.batch.ForwardBatch",
        sg(_HYB, "MambaAttnBackendBase._forward_metadata", _C_HYB,
           "mamba_cache_indices = req_to_token_pool.get_mamba_indices(req_pool_indices), query_start_loc"),
        vl("v1/attention/backends/gdn_attn.py", "GDNAttentionMetadata", "007d50058a06dec0f82472d63c819244d460c40d",
           "non_spec_state_indices_tensor, has_initial_state = context_lens > 0, non_spec_query_start_loc"),
    ),
    _c(
        "sglang.kda_dispatcher", "6.4",
        "A kernel per phase", "每个阶段一个 kernel",
        "Extend/prefill runs the chunk kernel, decode the fused recurrent kernel, speculative verify a "
        "recurrent kernel that keeps the state after every draft token. The layer does not choose: "
        "in SGLang the batch's forward mode picks forward_decode or forward_extend "
        "(HybridLinearAttnBackend.forward), and KDAKernelDispatcher holds the kernel implementation of "
        "each; vLLM branches on num_prefills inside the layer's custom op.",
        "extend/prefill 运行分块 kernel，decode 运行融合递推 kernel，投机解码的 verify 运行保存每个草稿 token "
        "之后状态的递推 kernel。选择不由层来做：SGLang 中由批次的前向模式选择 forward_decode 或 forward_extend"
        "（HybridLinearAttnBackend.forward），KDAKernelDispatcher 持有每种阶段的 kernel 实现；vLLM 则在层的"
        "自定义算子中按 num_prefills 分支。",
        "kda_ref.ops.dispatcher.KDAKernelDispatcher",
        sg(_KDA_BACKEND, "KDAKernelDispatcher", _C_BACKEND,
           "decode_kernel and extend_kernel (Triton); newer trees: linear/kda_kernel_dispatcher.py"),
        vl(_VKDA, "KimiDeltaAttention._forward", _C_VKDA, "if attn_metadata.num_prefills > 0: chunk_kda, else "
           "fused_recurrent_kda"),
    ),
    _c(
        "engine.mixed_batch", "1.1, 6.4",
        "A step that mixes decodes and prefill chunks", "同时含 decode 和 prefill 分块的一步",
        "When decodes share a forward with prefill chunks, both engines run the chunk kernel over every "
        "token: each decode is a one-token sequence starting from its own state. SGLang does this for a "
        "MIXED batch (only with --enable-mixed-chunk; by default a prefill batch runs without the "
        "decodes), vLLM whenever num_prefills > 0. Splitting the decodes off to the recurrent kernel "
        "costs a second launch but gives each kernel its own shape.",
        "当 decode 与 prefill 分块共享一次前向时，两个引擎都用分块 kernel 处理每一个 token：每个 decode 是一个"
        "只有一个 token、从自己的状态出发的序列。SGLang 对 MIXED 批次这样做（仅在 --enable-mixed-chunk 时；"
        "默认情况下 prefill 批次不带 decode 单独运行），vLLM 则只要 num_prefills > 0 就这样做。把 decode 拆给"
        "递推 kernel 要多启动一次，但每个 kernel 都处理自己擅长的形状。",
        "kda_ref.model.batch.ForwardBatch.phase_groups",
        sg("model_executor/forward_batch_info.py", "ForwardMode.is_extend", "271a25bc88ee9d9ada9b117299f2b9849e597569",
           "MIXED counts as extend (is_decode is DECODE only), so HybridLinearAttnBackend.forward sends it to "
           "forward_extend"),
        vl(_VKDA, "KimiDeltaAttention._forward", _C_VKDA,
           "if attn_metadata.num_prefills > 0: the chunk path for all non-speculative tokens, decodes included"),
    ),
    _c(
        "spec.state_rollback", "0, 6.4",
        "Speculative decoding: a state cannot be truncated", "投机解码：状态不能截断",
        "A KV cache rolls back a rejected draft by truncating it; a KDA state after the drafts has folded them "
        "in. So after acceptance the request must continue from the state after the last kept token, which "
        "the verify forward either keeps for every verified token (with its conv window) or can recompute "
        "from what it kept. SGLang copies it from a scratch buffer into the request's slot; vLLM gives each request 1 + k "
        "state blocks and reads block num_accepted - 1 next step; ReplaySSM keeps only the tokens' inputs and "
        "recomputes the kept state; vLLM's RecoverSSM for Kimi K3 keeps each token's correction and sums the "
        "kept state in closed form (spec.recoverssm). This engine does all four (spec_state per_step, slots, "
        "replay, recoverssm); with slots "
        "a verify step in which every request verifies 1 + k tokens writes each token's state into its block "
        "itself, as vLLM's kernel does, and nothing is copied after it. A draft "
        "tree (several candidates per position) needs a state per node, stepped from its parent's, and the "
        "commit of the last accepted node's state and branch KV: per_step only (SGLang PR #27463, merged, does this for "
        "hybrid models with topk > 1).",
        "KV 缓存通过截断来回滚被拒绝的草稿；而草稿之后的 KDA 状态已经把它们折叠进去了。因此接受之后请求必须从最后一个保留"
        "token 之后的状态继续：verify 前向要么为每个被验证的 token 保存这个状态（连同卷积窗口），要么保存足以重算它的输入。"
        "SGLang 把它从暂存缓冲区复制到请求的槽位；vLLM 给每个请求 1 + k 个状态块，下一步读取第 num_accepted - 1 块。"
        "ReplaySSM 只保存各 token 的输入并重算保留下来的状态；vLLM 为 Kimi K3 实现的 RecoverSSM 保存每个 token 的修正量，"
        "用闭式求和得到保留的状态（spec.recoverssm）。本引擎四种方式都支持（spec_state 为 per_step、slots、replay、"
        "recoverssm）；"
        "使用 slots 时，若一步里每个请求都验证 1 + k 个 token，verify 步会像 vLLM 的 kernel 那样亲自把每个 token 的状态写入"
        "对应的块，步后不再复制任何状态。"
        "草稿树（每个位置多个候选）需要每个节点一个状态、由其父节点的状态推进一步，并在接受后提交最后一个被接受节点的状态"
        "和该分支的 KV：只有 per_step 能做到（已合并的 SGLang PR #27463 为 topk > 1 的混合模型做了同样的事）。",
        "kda_ref.speculative.rollback.RollbackStrategy.commit",
        sg(_KDA_TRITON, "TritonKDAKernel.target_verify", _C_TRITON,
           "disable_state_update=True, intermediate_states_buffer, cache_steps, retrieve_parent_token (trees: in "
           "layers/attention/fla/fused_sigmoid_gating_recurrent.py, fused_sigmoid_gating_delta_rule_update_kernel, "
           "commit 06a2775, HAS_EAGLE_TREE_CUSTOM_ATTN_MASK loads every step but the first from its parent step's "
           "intermediate state; ours: recurrent_kda_verify(parents=...), kda_ref.engine.tree_verify)"),
        vl("v1/attention/backends/gdn_attn.py", "GDNAttentionMetadata", "007d50058a06dec0f82472d63c819244d460c40d",
           "spec_state_indices_tensor [batch, num_spec + 1], num_accepted_tokens: the next step reads slot "
           "num_accepted - 1, nothing is copied"),
    ),
    _c(
        "static.pad_rows", "0",
        "Static-shape decode: buckets and PAD rows", "静态形状 decode：分桶与 PAD 行",
        "A CUDA graph replays fixed shapes, so a decode step of n requests runs as the smallest captured "
        "batch size bs >= n, with its metadata copied into that bucket's preallocated buffers. The bs - n tail "
        "rows are padding: their state index is -1 (PAD_SLOT_ID) and every state kernel skips them. A padded "
        "row that reaches a live slot corrupts that request (an older SGLang _replay_metadata padded with index 0; "
        "it now pads with -1). Here the torch "
        "path sends a PAD row to the pools' reserved, zeroed PAD unit: it reads zeros and touches no live slot; "
        "on CUDA each bucket is captured as a graph in its first step (SGLang captures every batch size at startup), "
        "and on a CPU the capture code is tested against an emulation of CUDA graphs' rules: a capture executes "
        "nothing, every replay overwrites the same output buffers, a replay runs no Python.",
        "CUDA graph 只能回放固定形状，所以 n 个请求的 decode 步按不小于 n 的最小已捕获批大小 bs 运行，元数据被复制到该桶"
        "预先分配的缓冲区。末尾 bs - n 行是填充行：状态索引为 -1（PAD_SLOT_ID），每个状态 kernel 都跳过它们。填充行一旦"
        "碰到真实槽位就会破坏那个请求（较早版本的 SGLang _replay_metadata 用索引 0 填充，现在用 -1）。本引擎的 torch 路径把 PAD 行引向池中预留且全零的 PAD 单元：读到零，不碰任何真实槽位；在 CUDA 上每个桶在首次运行时被捕获为 graph"
        "（SGLang 在启动时捕获所有批大小），在 CPU 上捕获代码对照一个模拟 CUDA graph 规则的替身来测试：捕获本身不执行任何计算，"
        "每次回放覆盖同一组输出缓冲区，回放不运行 Python。",
        "kda_ref.engine.static_decode.StaticDecode",
        sg(_HYB, "MambaAttnBackendBase._replay_metadata", _C_HYB,
           "req_pool_indices[bs - num_padding:] = 0, then mamba_indices[bs - num_padding:] = -1; "
           "per-bs buffers from init_cuda_graph_state; get_cuda_graph_seq_len_fill_value() = 1"),
        vl("v1/attention/backends/gdn_attn.py", "GDNAttentionMetadataBuilder.build",
           "007d50058a06dec0f82472d63c819244d460c40d",
           "full-cudagraph decode: non_spec_state_indices_tensor[num_decodes:].fill_(PAD_SLOT_ID), "
           "non_spec_query_start_loc tail filled with the last offset"),
        sg("model_executor/cuda_graph_runner.py", "CudaGraphRunner.capture_one_batch_size",
           "0021673cd18b64f44373950249ff07177e493b4b",
           "capture() walks capture_bs largest first at startup; run_once() twice as warm-up on the dummy buffers, "
           "then torch.cuda.graph(graph, pool=global_graph_memory_pool, stream=stream); replay() copies the batch "
           "in, replays, returns views of output_buffers[bs] cut to raw_num_token"),
    ),
    _c(
        "static.torch_compile", "0",
        "Compiling the fixed-shape step: keep the state pools out of the graph",
        "编译固定形状的步骤：把状态池挡在图外",
        "A compiler may fuse a bucket's hundreds of small ops into a few kernels (SGLang compiles the forward of "
        "each captured batch size up to --torch-compile-max-bs when --enable-torch-compile is on). But a step "
        "writes the conv, recurrent and KV pools in place, and a compiler that sees an in-place write into a graph "
        "input rewrites it as 'copy the pool with these rows changed, then copy it back': here that copied every "
        "layer's whole pool each step (about 36 ms against 3.3 ms eager, 64 MiB budget). vLLM keeps the caches out "
        "of the graph: its KDA layer calls one custom operator (kda_attention) that looks the layer's caches up "
        "itself. This engine compiles the whole step (LLM(torch_compile=True)) and writes and reads the pools "
        "through two opaque operators (kda_ref::scatter_rows_, kda_ref::gather_rows): no pool copy, and no read "
        "moved past a write. They are registered straight into a torch.library.Library, as vLLM's "
        "direct_register_custom_op does, because torch.library.custom_op's Python wrappers cost ~20 us a call. "
        "SGLang compiles with mode='max-autotune-no-cudagraphs', which on a GPU benchmarks GEMM templates; "
        "LLM(compile_gemm=True) sends every product through inductor's C++ GEMM template over weights frozen into "
        "the graph, the only candidate offered on the CPU (a verify step's 4-row products 41 -> 10 us).",
        "编译器可以把一个桶里几百个小算子融合成少数几个 kernel（SGLang 在开启 --enable-torch-compile 时，为每个不超过 "
        "--torch-compile-max-bs 的已捕获批大小编译一次前向）。但一步会原地写入卷积、递推状态和 KV 三个池；编译器看到对"
        "图输入的原地写入，会把它改写成“复制整个池并改掉这些行，再复制回去”：在这里每一步都复制了每一层的整个池（默认 "
        "64 MiB 预算下约 36 ms，而 eager 只要 3.3 ms）。vLLM 把缓存挡在图外：它的 KDA 层只调用一个自定义算子"
        "（kda_attention），由算子自己查找该层的缓存。本引擎编译整个步骤（LLM(torch_compile=True)），通过两个不透明算子"
        "（kda_ref::scatter_rows_、kda_ref::gather_rows）读写状态池：既不复制池，也不会把读操作挪到写操作之后。这两个算子"
        "像 vLLM 的 direct_register_custom_op 那样直接注册进 torch.library.Library，因为 torch.library.custom_op 的 "
        "Python 包装层每次调用约需 20 微秒。SGLang 用 mode='max-autotune-no-cudagraphs' 编译，在 GPU 上会对 GEMM 模板做基准测试再挑选；"
        "LLM(compile_gemm=True) 让每个矩阵乘都走 inductor 的 C++ GEMM 模板，权重冻结进图中，这是 CPU 上唯一提供的候选"
        "（验证步骤中 4 行的矩阵乘从 41 微秒降到 10 微秒）。",
        "kda_ref.engine.static_decode.StaticDecode._compile",
        sg("model_executor/cuda_graph_runner.py", "get_batch_sizes_to_capture",
           "0021673cd18b64f44373950249ff07177e493b4b",
           "compile_bs = capture_bs <= torch_compile_max_bs when enable_torch_compile; then patch_model yields "
           "torch.compile(model.forward, mode='max-autotune-no-cudagraphs', dynamic=False), then the graph is captured"),
        vl("model_executor/layers/kda.py", "kda_attention",
           "1d03ed8fbdcb127140c12f2d2f15a7192c3daf0c",
           "KimiDeltaAttention.forward calls torch.ops.vllm.kda_attention, registered by "
           "direct_register_custom_op(op_name='kda_attention', mutates_args=['core_attn_out']); the op reads "
           "self.kv_cache from the forward context, so the compiled graph never holds the conv / recurrent caches; "
           "direct_register_custom_op (vllm/utils/torch_utils.py, commit 0024350b) defines the op's schema and kernel "
           "in a torch.library.Library directly: 'torch.library.custom_op can have significant overhead'"),
    ),
    _c(
        "cp.prefix_scan", "0",
        "Context parallelism: states do not add", "上下文并行：状态不能相加",
        "Split a long prompt over ranks. Attention layers can gather each other's KV, but a KDA state after a "
        "segment depends on every earlier segment, and states computed from zero cannot be summed. Each "
        "segment is an affine map of its incoming state, S -> A S + B (A the product of the tokens' "
        "(I - beta k k^T) Diag(alpha), latest on the left; B the segment run from zero). Ranks all-gather "
        "their maps, [HV, K, V + K] per head, and each folds the earlier ones into its true incoming state "
        "(a prefix scan), then recomputes its outputs from it. The short conv needs the previous rank's last "
        "W - 1 inputs; MLA gathers the latent rows.",
        "把长提示词拆到多个 rank 上。注意力层可以互相收集 KV，但某段之后的 KDA 状态依赖于之前所有段，从零开始算出的状态"
        "不能相加。每一段都是其输入状态的仿射映射 S -> A S + B（A 是各 token 的 (I - beta k k^T) Diag(alpha) 之积，"
        "最新的在最左；B 是该段从零状态运行的结果）。各 rank 对彼此的映射做 all-gather（每个头 [HV, K, V + K]），每个 rank 把之前"
        "的映射折叠成自己真正的输入状态（前缀扫描），再据此重算输出。短卷积需要前一个 rank 的最后 W - 1 个输入；MLA "
        "收集潜在行。",
        "kda_ref.context_parallel.forward.rank_forward",
        sg("layers/attention/linear/kda_cp.py", "build_kda_fla_cp_context", "f1a00d142e28cf9208e8b537fc65d332e7a24d5d",
           "\"QKV activations stay rank-local; only the much smaller per-segment state transforms are gathered\"; "
           "zigzag: each rank owns blocks r and 2R - 1 - r of every request (ours: one contiguous slice); at this "
           "commit kda_use_prefill_cp requires is_npu(); maps as [H | M] (compose_kda_cp_affine_states). SGLang PR "
           "#34059 (open as read on 2026-12-02) adds a contiguous split, one slice per rank, like ours"),
        missing("a context-parallel path for KDA / GDN layers",
                "vLLM's prefill context parallelism (RFC #25749, open; MLA support merged as PR #46570, GQA pending "
                "in PR #49564, as read on 2026-12-02; the first full PR, #26864 (PCP with GQA on FlashInfer), was "
                "closed unmerged and split: its basic PCP plumbing (a PCP process group, the command-line "
                "arguments, KV-cache block tables) merged as PR #28718, while its GQA FlashInfer part, PR #28723, "
                "and an early MLA port, PR #28988, were closed unmerged) splits attention layers only; no KDA / "
                "GDN path was found"),
        fla("cp/chunk_delta_h.py", "chunk_gated_delta_rule_fwd_h_pre_process", "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89",
            "hm = k.new_zeros(HV, K, V + K): [S | M], the state columns first, per head in fp32; all_gather_into_tensor, "
            "predecessors merged into initial_state (merged in PR #691, commit 13a90874)"),
    ),
    _c(
        "pd.state_transfer", "4.4, 5.6",
        "Disaggregation moves more than KV", "分离部署搬运的不只是 KV",
        "When a prefill instance hands a request to a decode instance, a pure-attention model sends its KV. "
        "A KDA + MLA hybrid must send the MLA KV of every prompt token and each KDA layer's recurrent state and "
        "conv window, all at the same token boundary, with the first sampled token. The transfer engine only "
        "moves bytes between registered buffers and reports a status; which regions, which boundary, which "
        "slot, and what to do when a check fails (here: release and recompute) is the serving engine's job. "
        "KV rows can leave with each prefill chunk (they never change once written); the states only with the "
        "last send, since mid-prefill they are the state of a boundary nobody decodes from.",
        "当 prefill 实例把请求交给 decode 实例时，纯注意力模型只需发送 KV。KDA + MLA 混合模型必须发送每个提示词 token 的 "
        "MLA KV，以及每个 KDA 层的递推状态和卷积窗口，且它们都处于同一个 token 边界，还要带上第一个采样出的 token。传输"
        "引擎只在已注册的缓冲区之间搬运字节并报告状态；发送哪些区域、在哪个边界、装进哪个槽位、检查失败时怎么办（这里："
        "释放并重算）是服务引擎的职责。KV 行可以随每个 prefill chunk 发出（写入后不再改变）；状态只随最后一次发送，"
        "因为 prefill 中途的状态属于一个没有人会从它开始 decode 的边界。",
        "kda_ref.disagg.llm.DisaggregatedLLM",
        sg("disaggregation/prefill.py", "SchedulerDisaggregationPrefillMixin.send_kv_chunk",
           "0bd35246c01fd728e42c82bab2654c29cbd9a08f",
           "KV pages sent chunk by chunk; the first token goes to the metadata buffer with the last chunk "
           "(is_last); Success / Failed polled in process_disagg_prefill_inflight_queue. The decode side "
           "preallocates KV pages and a Mamba slot before the transfer (DecodePreallocQueue, disaggregation/decode.py "
           "@278e503a); the pair is chosen per request (MiniLoadBalancer.select_pair, disaggregation/mini_lb.py "
           "@001c2ae0: random prefill and decode server, joined by a bootstrap_room)"),
        missing("the KDA state in a vLLM connector",
                "KDA layers travel in vLLM's hybrid KV-cache manager as a Mamba-type group; NixlConnector's "
                "Mamba / GDN transfer (PRs #37635, #41869) was not read at a commit here"),
    ),
    _c(
        "sglang.radix_linear_attention_forward", "6.3",
        "The unified linear-attention entry", "统一的线性注意力入口",
        "Every KDA layer enters attention through one call. In SGLang RadixLinearAttention.forward only "
        "hands the layer to the attention backend; the backend found every sequence's state slot once per "
        "batch (its forward metadata) and fetches the layer's conv and recurrent pools by layer id. The "
        "model code never touches cache slots itself.",
        "每个 KDA 层都通过同一个调用进入注意力计算。在 SGLang 中，RadixLinearAttention.forward 只是把层交给注意力"
        "后端；后端在每个批次的前向元数据中一次性找到每个序列的状态槽位，并按层号取出该层的卷积池和递推池。模型代码本身"
        "从不直接操作缓存槽。",
        "kda_ref.model.kda_layer.KDAAttention.forward",
        sg("layers/radix_linear_attention.py", "RadixLinearAttention.forward",
           "008b79d2358b08adf9b6c879625030f890c8c4e2",
           "return get_attn_backend().forward(layer=self, ...); the states are found in "
           "`MambaAttnBackendBase._forward_metadata` and `KDAAttnBackend.forward_*`"),
        vl(_VKDA, "KimiDeltaAttention._forward", _C_VKDA, "reached through the kda_attention custom op; the state "
           "is self.kv_cache[virtual_engine]"),
    ),
    _c(
        "sglang.kda_layer", "6.2",
        "The KDA layer is more than matmuls", "KDA 层不只是矩阵乘",
        "Projections, short convolution, l2-normalised q and k, the low-rank forget gate, β, the "
        "KDA core, a gated head-wise RMSNorm and the output projection: the states the cache must "
        "hold come from several of these steps, not only from the KDA core.",
        "投影、短卷积、l2 归一化的 q 和 k、低秩遗忘门、β、KDA 核心、带门控的逐头 RMSNorm 和输出投影："
        "缓存必须保存的状态来自其中好几步，而不只是 KDA 核心。",
        "kda_ref.model.kda_layer.KDAAttention",
        sg("models/kimi_k3.py", "KimiK3DeltaAttention", "0000e9b46f38dd9055ecad825a42c47a047077e6",
           "the class the article names (Kimi K3; a full-rank gate option); Kimi-Linear's is "
           "models/kimi_linear.py::KimiDeltaAttention"),
        vl(_VKDA, "KimiDeltaAttention", _C_VKDA),
    ),
    # ---- Kimi K3 ----------------------------------------------------------------------------------------------
    _c(
        "model.k3", "6.2",
        "Kimi K3: what changes for serving", "Kimi K3：对推理服务而言改变了什么",
        "Kimi K3 keeps Kimi-Linear's hybrid (69 KDA and 24 MLA layers: every 4th layer and the last are MLA) and "
        "changes what the layers compute: a bounded forget gate and a full-rank output gate in KDA, q-LoRA and an "
        "output gate in MLA, attention residuals over blocks of 12 layers, SiTU instead of SiLU, a latent MoE of "
        "896 MXFP4 experts, an MTP layer. What the caches hold per request is the same three kinds of state, larger: "
        "a K3 checkpoint (all KDA layers) is about 430 MiB in fp32. Its release wraps the text model in a "
        "multimodal one: config.json's text_config, tensors under language_model., a vision tower to skip.",
        "Kimi K3 保留了 Kimi-Linear 的混合结构（69 个 KDA 层和 24 个 MLA 层：每第 4 层和最后一层是 MLA），改变的是各层"
        "计算的内容：KDA 有有下界的遗忘门和满秩输出门，MLA 有 q-LoRA 和输出门，按 12 层一块做注意力残差，用 SiTU 代替 "
        "SiLU，896 个 MXFP4 专家的潜空间 MoE，以及一个 MTP 层。每个请求缓存的仍是那三种状态，只是更大：一个 K3 checkpoint"
        "（所有 KDA 层）以 fp32 计约 430 MiB。它的发布包把文本模型包在多模态模型里：config.json 的 text_config、"
        "language_model. 前缀下的张量，以及需要跳过的视觉塔。",
        "kda_ref.model.config.ModelConfig.kimi_k3",
        sg("models/kimi_k3.py", "KimiK3DeltaAttention", "0000e9b46f38dd9055ecad825a42c47a047077e6",
           "K3's KDA layer; its A_log loader takes the first num_heads values of the [head_dim] vector"),
        vl("models/kimi_k3/nvidia/model.py", "KimiK3ForConditionalGeneration", "006193b5a9a7957c11bc6472588f951e778072b5",
           "the text model built from config.text_config; KimiLinearModel.forward runs the attention residuals"),
    ),
    _c(
        "kda.gate_bounded", "6.2",
        "K3's bounded forget gate", "K3 有下界的遗忘门",
        "K3 replaces g = −exp(A_log)·softplus(f + dt_bias) by g = lower_bound·sigmoid(exp(A_log)·(f + dt_bias)) "
        "with lower_bound = −5: every log decay lies in [−5, 0), so α = exp(g) ≥ e⁻⁵ ≈ 0.0067 per step. A kernel "
        "may then assume it: fla's chunk_kda computes the gate inside the kernel (use_gate_in_kernel) and, with "
        "safe_gate and the lower bound, takes its 'M=16 TensorCore' path for bounded gates; vLLM's FlashKDA "
        "prefill runs only on a bounded gate. Kimi-Linear's gate has no floor: one token can erase a channel "
        "completely (exp of a very negative g is 0 in fp32).",
        "K3 把 g = −exp(A_log)·softplus(f + dt_bias) 换成 g = lower_bound·sigmoid(exp(A_log)·(f + dt_bias))，"
        "lower_bound = −5：每个对数衰减都在 [−5, 0) 内，所以每步 α = exp(g) ≥ e⁻⁵ ≈ 0.0067。内核因此可以假设这一点："
        "fla 的 chunk_kda 在内核里计算门（use_gate_in_kernel），并在 safe_gate 加下界时走针对有界门的“M=16 "
        "TensorCore”路径；vLLM 的 FlashKDA prefill 只在有界门下运行。Kimi-Linear 的门没有下限：一个 token 就能把一个"
        "通道完全抹掉（g 很负时 exp(g) 在 fp32 下就是 0）。",
        "kda_ref.ops.gate.kda_gate_lowerbound",
        sg("models/kimi_k3.py", "KimiK3DeltaAttention", "0000e9b46f38dd9055ecad825a42c47a047077e6",
           "gate_lower_bound from linear_attn_config"),
        vl("models/kimi_k3/nvidia/kda.py", "KimiK3DeltaAttention", "055e47c28003156421365af985d676fc921cb075",
           "_KDA_GATE_LOGBOUND_MIN = -5.0; the FlashKDA prefill runs only with a bounded gate "
           "(is_flashkda_supported)"),
        fla("kda/gate.py", "naive_kda_lowerbound_gate", "bc3b101dcb713ddc5bd8924b66754eb68b5ccf89",
            "g = lower_bound * sigmoid(exp(A_log) * (g + dt_bias))"),
    ),
    _c(
        "model.attn_res", "6.2",
        "Attention residuals", "注意力残差",
        "K3's residual stream is not one running sum. The layers form blocks of 12; the stream keeps each finished "
        "block's sum (block 0 is the embedding) and the current block's running sum, and the input of every "
        "attention and MLP is a softmax over depth of those sources, scored per token against one learned vector. "
        "It is per token: caches, chunking and sequence sharding do not see it, but a forward carries up to 9 "
        "hidden-sized tensors per token instead of one.",
        "K3 的残差流不是一个累加和。各层按 12 层分块；残差流保存每个已完成块的和（块 0 是嵌入）和当前块的累加和，"
        "每个注意力和 MLP 的输入是对这些来源在深度方向上的 softmax 加权，每个 token 用一个学到的向量打分。它是逐 "
        "token 的：缓存、分块和序列切分都看不到它，但前向过程中每个 token 要带着最多 9 个隐藏维度大小的张量，而不是一个。",
        "kda_ref.model.decoder.BlockAttnResidual",
        missing("attention residuals in SGLang's models/kimi_k3.py", "not read for this concept"),
        vl("models/kimi_k3/nvidia/ops/attn_res.py", "attn_res", "055e47c28003156421365af985d676fc921cb075",
           "the mix fused with the next RMSNorm in one Triton kernel"),
    ),
    _c(
        "model.moe_grouped", "1.1",
        "A prefill's MoE: tokens grouped by expert", "prefill 中的 MoE：按专家分组 token",
        "Each token uses top-k of the routed experts. A decode step of a few tokens runs every expert on every "
        "token and masks the routing (fewer, larger products); a prefill step of a thousand tokens sorts the "
        "token-expert pairs by expert once and runs each expert on its own rows, adding the weighted results "
        "back in place. vLLM's and SGLang's fused MoE kernels start from the same sort (moe_align_block_size), "
        "padded to the kernel's block size.",
        "每个 token 只使用 top-k 个路由专家。只有几个 token 的 decode 步让每个专家处理每个 token，再用路由权重屏蔽"
        "（更少、更大的矩阵乘）；上千个 token 的 prefill 步则先把 token-专家对按专家排序一次，每个专家只处理分给它的"
        "行，再把加权结果就地加回。vLLM 和 SGLang 的融合 MoE kernel 也从同样的排序开始（moe_align_block_size），"
        "并按 kernel 的块大小补齐。",
        "kda_ref.model.mlp.MoE.forward_fused",
        sg("layers/moe/fused_moe_triton/fused_moe.py", "fused_experts_impl", "639afcec15c9a10d1a83d828838e60b368dc5d17",
           "per chunk of tokens: moe_align_block_size(topk_ids, BLOCK_SIZE_M, E), then invoke_fused_moe_kernel "
           "over the sorted rows, twice"),
        vl("model_executor/layers/fused_moe/moe_align_block_size.py", "moe_align_block_size",
           "c63201bac8a4c9fb08fd5e6cd4d58b00b3ca62d2",
           "sorted_token_ids by allocated expert, padded to block_size; expert_ids per block"),
    ),
    _c(
        "mla.prefill_attention", "1.2",
        "MLA prefill attention on a CPU", "CPU 上的 MLA prefill 注意力",
        "MLA's prefill expands the latents into per-head keys and values and attends. Its value heads are narrower "
        "than its query and key heads, and torch's fused CPU kernel takes one width only: without padding the "
        "values with zeros it falls back to a materialised T×T softmax, five times slower at 2,048 tokens. vLLM's "
        "Zen CPU backend pads V the same way; its generic CPU backend attends request by request with a dense "
        "softmax. Here the fresh prompts of one length in a step are attended in one call.",
        "MLA 的 prefill 把潜在行展开成每个头的 key 和 value 再做注意力。它的 value 头比 query、key 头窄，而 torch 的"
        "融合 CPU kernel 只接受同一宽度：不用零把 value 补齐，就会退回到显式的 T×T softmax，在 2,048 个 token 时慢五倍。"
        "vLLM 的 Zen CPU 后端以同样方式补齐 V；它的通用 CPU 后端逐请求用稠密 softmax 计算。这里把一步中同样长度的"
        "新提示词放在一次调用里计算。",
        "kda_ref.ops.mla.mla_attention_naive",
        missing("SGLang's CPU MLA prefill", "not read for this concept"),
        vl("v1/attention/backends/mla/prefill/zen_cpu_sdpa.py", "ZenCPUSDPAMLAPrefillBackend._sdpa_layout",
           "2fd3f64ea790a2e1d5b861bf4a45daa9e4e0a981",
           "V padded up to the query head dim for zentorch_sdpa; cpu_sdpa.py @6d7a5bb7 "
           "CPUSDPAMLAPrefillBackend._ragged_sdpa loops over requests with matmul, masked_fill and softmax"),
    ),
    _c(
        "model.mxfp4", "6.2",
        "MXFP4 routed experts", "MXFP4 路由专家",
        "K3's release stores each routed expert's weights as MXFP4: 4-bit E2M1 codes, two a byte (low nibble "
        "first), and one E8M0 power-of-two scale per 32 input columns, a quarter of bf16's bytes plus 1/32 byte per "
        "value. This engine dequantises at load and checks every scale; a save writes the same bytes back.",
        "K3 发布包把每个路由专家的权重存成 MXFP4：4 位 E2M1 码，一个字节两个（低半字节在前），每 32 个输入列一个 "
        "E8M0 的 2 的幂缩放，字节数约为 bf16 的四分之一，另加每个值 1/32 字节。本引擎在加载时反量化并检查每个缩放；"
        "保存时写回同样的字节。",
        "kda_ref.ops.mxfp4.dequantize_mxfp4",
        missing("SGLang's K3 MoE weight loader", "not read for this concept"),
        vl("models/kimi_k3/nvidia/model.py", "KimiK3MegaMoEExperts", "006193b5a9a7957c11bc6472588f951e778072b5",
           "E8M0 scales decoded to `2**(e-127)`, one per 32 input columns"),
    ),
    _c(
        "spec.recoverssm", "0, 6.2",
        "RecoverSSM: corrections kept, the state summed in closed form", "RecoverSSM：保存修正量，用闭式求和得到状态",
        "vLLM's speculative path for Kimi K3 (PR #51855, its description dated 2026-08-11). The verify reads the request's one "
        "checkpoint slot without writing it and stores, per draft token and head, the delta rule's correction "
        "u_t = beta_t (v_t - (Diag(alpha_t) S_{t-1})^T k_t) in fp32 and the key and raw gate in the activation "
        "dtype. u_t already carries what token t read from the earlier state, so after acceptance the state is "
        "a sum, S_n = Diag(prod alpha) S_0 + sum_t Diag(prod_{s>t} alpha_s) k_t u_t^T, with no serial replay; the "
        "conv state, widened by k columns during speculation, is compacted to the W - 1 columns ending at the "
        "last kept token. One slot per request instead of 1 + k: the PR reports +10.97% effective cache capacity "
        "for K3 at TP8. Here (spec_state=\"recoverssm\") the record is the verify step's output, not pages beside "
        "each state block; it keeps the normalised key and the log decay g in fp32 rather than the raw key and "
        "gate; and the commit computes the state after every kept token (one masked sum) so a prefix cache can "
        "be offered any of them, where vLLM writes the final state and one block-boundary state (align mode).",
        "vLLM 为 Kimi K3 实现的投机解码路径（PR #51855，其描述写于 2026-08-11）。verify 读取请求唯一的 checkpoint 槽位但不写入，"
        "为每个草稿 token 和每个头保存 delta 规则的修正量 u_t = beta_t (v_t - (Diag(alpha_t) S_{t-1})^T k_t)（fp32），"
        "以及激活精度的键和原始门控。u_t 已经包含了 token t 从更早状态读到的一切，所以接受之后的状态是一个求和："
        "S_n = Diag(prod alpha) S_0 + sum_t Diag(prod_{s>t} alpha_s) k_t u_t^T，无需串行重放；投机期间多出 k 列的卷积"
        "状态被压缩成以最后一个保留 token 结尾的 W - 1 列。每个请求一个槽位而不是 1 + k 个：该 PR 报告 K3 在 TP8 下有效"
        "缓存容量 +10.97%。本引擎（spec_state=\"recoverssm\"）把这份记录作为 verify 步的输出，而不是每个状态块旁的页；"
        "保存的是归一化后的键和对数衰减 g（fp32），而不是原始键和门控；提交时计算每个保留 token 之后的状态（一次带掩码的"
        "求和），以便把其中任意一个交给前缀缓存，而 vLLM 只写最终状态和一个块边界状态（align 模式）。",
        "kda_ref.speculative.recoverssm.RecoverSSM",
        missing("SGLang's RecoverSSM", "SGLang's KDA speculative commit replays the kept tokens instead "
                "(commit_kda_replayssm_after_verify, see spec.state_rollback)"),
        vl("models/kimi_k3/nvidia/ops/recoverssm.py", "_commit_kda_state_kernel", "055e47c28003156421365af985d676fc921cb075",
           "_kda_recoverssm_verify_kernel stores correction_cache [block, head, pos, V] fp32 and kg_cache [block, "
           "head, pos, 2K]; _prepare_commit_plan_kernel: commit_len = min(num_accepted, query_len); the commit walks "
           "the kept tokens backwards; _compact_conv_state_kernel copies the history from offset commit_len - 1"),
    ),
    _c(
        "spec.mtp", "6.2",
        "K3's MTP layer as a drafter", "K3 的 MTP 层作为草稿模型",
        "An MTP layer reads the main model's last hidden state (before model.norm) and the embedding of the next "
        "token, runs one MLA decoder layer and predicts the token after next. Because it is MLA, a draft from it "
        "carries no recurrent state: only the target's KDA states need a rollback when drafts are rejected. "
        "Here speculative=\"mtp\" drafts with it: after every step the engine hands the drafter the target's "
        "hidden rows of the committed tokens, the layer keeps its own MLA KV over them, and k drafts chain, "
        "the layer's own output standing in for the target's hidden state after the first. vLLM runs it as "
        "method kimi_k3_mtp, one of its EAGLE-style methods, with the layer's KV in the engine's paged cache; "
        "here that KV lives in the drafter. A chain's first step runs the rows before its last for their KV "
        "alone: here its MoE and head see the last row only, where vLLM runs the whole layer over every row "
        "and takes the logits at the last.",
        "MTP 层读取主模型最后的隐藏状态（model.norm 之前）和下一个 token 的嵌入，运行一个 MLA 解码层，预测再下一个 "
        "token。因为它是 MLA，用它生成的草稿不带递推状态：草稿被拒绝时，只有目标模型的 KDA 状态需要回滚。"
        "本引擎用 speculative=\"mtp\" 以它起草：每一步之后，引擎把已提交 token 的目标模型隐藏状态交给起草器，该层在"
        "其上保存自己的 MLA KV，k 个草稿依次链式生成，从第二个起由该层自己的输出代替目标模型的隐藏状态。vLLM 以方法 "
        "kimi_k3_mtp（其 EAGLE 类方法之一）运行它，该层的 KV 放在引擎的分页缓存里；本引擎则放在起草器中。"
        "链的第一步中，最后一行之前的各行只为写入 KV 而运行：本引擎的 MoE 和输出头只处理最后一行，而 vLLM 对每一行"
        "运行整个层，只在最后一行取 logits。",
        "kda_ref.speculative.mtp_drafter.MTPDrafter",
        missing("SGLang's K3 MTP draft model", "not read for this concept"),
        vl("models/kimi_k3/nvidia/mtp.py", "KimiK3MultiTokenPredictorLayer", "055e47c28003156421365af985d676fc921cb075",
           "an MLA decoder layer over eh_proj([enorm(embed), hnorm(hidden)]); vllm/config/speculative.py "
           "(commit 002e77c1) lists kimi_k3_mtp in MTPModelTypes, part of EagleModelTypes; "
           "vllm/v1/spec_decode/eagle.py EagleProposer.propose (commit 008603a3) runs the draft layer over "
           "every row and computes logits at last_token_indices only"),
    ),
    # ---- the engine ------------------------------------------------------------------------------------------
    _c(
        "engine.continuous_batching", "0, 1.1",
        "Continuous batching", "连续批处理",
        "Every engine step the scheduler decides again who runs: running requests keep their place "
        "(a decode token or their next prefill chunk), finished ones leave at once, and waiting "
        "requests are admitted while the token budget and memory allow. vLLM runs all of them as one "
        "varlen forward; SGLang runs a prefill batch on its own and the decodes in the next step, unless "
        "--enable-mixed-chunk lets them share it.",
        "引擎每一步都由调度器重新决定谁来运行：正在运行的请求保留位置（一个 decode token 或下一个 "
        "prefill 分块），完成的请求立即离开，等待中的请求在 token 预算和内存允许时被接纳。vLLM 把它们全部放进一次"
        "变长前向；SGLang 则单独运行 prefill 批次、在下一步运行 decode，除非 --enable-mixed-chunk 让它们合在一起。",
        "kda_ref.engine.scheduler.Scheduler.schedule",
        sg("managers/scheduler.py", "Scheduler.get_next_batch_to_run", "8d3328cb7020c98abdd6b35418fe88d89d1458f4",
           "a new prefill batch first; mix_with_running only when is_mixed_chunk", repo=_FORK_YZ),
        vl(_VSCHED, "Scheduler.schedule", _C_VSCHED, "RUNNING requests first, then WAITING ones, under one token_budget"),
    ),
    _c(
        "engine.chunked_prefill", "1.1, 1.3",
        "Chunked prefill", "分块预填充",
        "A prompt longer than what is left of the step's token budget is prefilled in chunks over "
        "several steps. For KDA this is exact because the state passes from chunk to chunk in order — "
        "split into segments, but keep the order — each chunk starting from the state the previous "
        "one wrote into the request's slot.",
        "当提示长度超过本步剩余的 token 预算时，它会分成多个分块在多个步骤中预填充。对 KDA 来说这是精确的："
        "状态按顺序在分块之间传递——可分段，但必须保序——每个分块都从上一个分块写入该请求状态槽位的状态开始。",
        "kda_ref.engine.scheduler.Scheduler.schedule",
        sg("managers/schedule_policy.py", "PrefillAdder", "ad0119fdde519598c25f5c48b95dacaa2b85d607",
           "rem_chunk_tokens and new_chunked_req; sized by --chunked-prefill-size"),
        vl(_VSCHED, "Scheduler.schedule", _C_VSCHED, "num_new_tokens = min(num_new_tokens, token_budget)"),
    ),
    _c(
        "engine.preemption", "2.2",
        "Preemption by recompute", "抢占与重算",
        "When a running request needs memory that is not there, the scheduler frees a victim's state "
        "slot and KV pages and puts it back in the queue. A KDA state cannot be shrunk or cut back to "
        "an earlier token, so the victim restarts from token 0 (or from a prefix-cache checkpoint); "
        "with greedy sampling it then produces exactly the same tokens.",
        "当正在运行的请求需要的内存不足时，调度器释放某个被抢占请求的状态槽位和 KV 页，并把它放回队列。"
        "KDA 状态无法缩小，也无法退回到更早的 token，所以被抢占的请求要从第 0 个 token（或前缀缓存的 "
        "checkpoint）重新开始；在贪心采样下它随后生成的 token 完全相同。",
        "kda_ref.engine.scheduler.Scheduler.preempt",
        sg("managers/schedule_batch.py", "ScheduleBatch.retract_decode", "000eaffacf048e51b64d4d72985ef8f0b7054b39",
           "release_req frees the KV from last_uncached_pos on (the cached prefix stays) and re-queues the request"),
        vl(_VSCHED, "Scheduler._preempt_request", _C_VSCHED,
           "called from Scheduler.schedule when kv_cache_manager.allocate_slots fails"),
    ),
    _c(
        "engine.progress", "4.1, 5.5",
        "The progress guarantee", "进展保证",
        "A hybrid request holds more than KV pages: an active state slot, a rollback strategy's extra slots, "
        "the checkpoint its prefix-cache path pins and a tracking policy's slots. The engine counts that peak "
        "when a request arrives and refuses one that could not run even alone (and an engine on which no "
        "request could run). When requests wait and none runs, the head is admitted after the cache gives "
        "back everything no running request holds, or it finishes with an error naming its numbers; a "
        "request running alone never preempts itself; and a watch errors every request if no request "
        "advances for longer than any correct run can, instead of spinning. Neither reference counts the "
        "state slots a hybrid request pins: vLLM checks at start-up that its KV cache holds one request of "
        "max_model_len; SGLang checks the pools for leaks when idle and kills the server when one forward "
        "hangs, which a loop of steps that move nothing passes.",
        "混合模型的请求占用的不只是 KV 页：一个活动状态槽位、回滚策略的额外槽位、前缀缓存路径为它钉住的 "
        "checkpoint，以及跟踪策略的槽位。引擎在请求到达时计算这个峰值，拒绝即使单独运行也放不下的请求（也拒绝"
        "任何请求都无法运行的引擎）。当有请求在等待而没有请求在运行时，缓存交还所有未被运行中请求持有的条目后"
        "接纳队首请求，否则以错误结束它并给出数字；单独运行的请求从不抢占自己；如果在比任何正确运行都更长的步数内"
        "没有请求前进，一个监视器会以错误结束所有请求，而不是空转。两个参考实现都没有计算混合模型请求钉住的"
        "状态槽位：vLLM 在启动时检查 KV 缓存能否容纳一个 max_model_len 的请求；SGLang 在空闲时检查内存池是否"
        "泄漏，并在单次前向卡住时结束服务器，而一直执行却没有任何进展的循环能通过这两项检查。",
        "kda_ref.engine.request_memory.grow_or_wait",
        sg("managers/scheduler_runtime_checker_mixin.py", "SchedulerRuntimeCheckerMixin.on_idle",
           "008e7b87b07c4ef50f6506ffd1ae956fb9e16021",
           "available + evictable + protected must equal each pool's size when fully idle (a leak check); "
           "create_scheduler_watchdog fires when forward_ct stops moving for watchdog_timeout"),
        vl("v1/core/kv_cache_utils.py", "check_enough_kv_cache_memory", "001cabc1be16a59a70d720ed61a13b678c060a18",
           "at start-up: the KV cache must hold one request of max_model_len, else a ValueError with the "
           "largest max_model_len that fits"),
    ),
    _c(
        "state.kda_recurrent", "1.2, 2.1",
        "KDA recurrent state", "KDA 递推状态",
        "Per KDA layer and sequence, one float32 K×V matrix per head, [HV, K, V]: everything the layer "
        "remembers of the sequence so far. Its size does not depend on the length, it is overwritten "
        "in place every token, and it lives in a state slot that the kernels find through "
        "state_indices.",
        "每个 KDA 层、每个序列，每个头一个 float32 的 K×V 矩阵，即 [HV, K, V]：该层对序列至今的全部记忆。"
        "它的大小与序列长度无关，每个 token 都会被原地覆盖，并存放在一个状态槽位中，kernel 通过 "
        "state_indices 找到它。",
        "kda_ref.model.layer_state.HybridCacheTensors",
        sg(_POOL, "MambaPool.State", _C_YZ, "temporal [layers, slots + 1, ...] beside the conv windows; slot 0 pads",
           repo=_FORK_YZ),
        vl(_VKDA, "KimiDeltaAttention._forward", _C_VKDA, "recurrent_state: the layer's float32 state tensor"),
    ),
    _c(
        "memory.state_slot", "1.2, 4.3",
        "State slots", "状态槽位",
        "A request's KDA states (recurrent and conv, for all KDA layers) occupy one slot of a pool, "
        "allocated when it is admitted and freed when it finishes; slot 0 is reserved padding. A "
        "batch lists each sequence's slot in state_indices, and the kernels read and write the pool "
        "in place there. An active slot is written every step, so it is never shared: reusing a "
        "state means copying it into a fresh slot.",
        "一个请求的 KDA 状态（所有 KDA 层的递推状态和卷积状态）占用池中的一个槽：请求被接纳时分配，"
        "结束时释放；0 号槽是保留的填充槽。批次在 state_indices 中列出每个序列的槽，kernel 就在那里原地"
        "读写池。活跃的槽每一步都会被写入，因此从不共享：复用一个状态意味着把它复制到一个新槽中。",
        "kda_ref.memory.pool.UnifiedMemoryPool.alloc",
        sg("mem_cache/allocator/mamba.py", "MambaSlotAllocator.alloc", "2e3581f311a4b731e9696e7306ea791fac951fbf",
           "slot 0 is a dummy write target for padded rows; MambaPool.copy_from / fork_from copy states"),
        vl("v1/attention/backends/utils.py", "mamba_get_block_table_tensor", "00bd1493b3e82d6c13c68ee8a0e1c5a96707e190",
           "a state is one block of the mamba group: the block id is the slot"),
    ),
    _c(
        "memory.page_kind", "0, 4.1",
        "Page kinds", "页面种类",
        "A hybrid model's cache memory holds units of different kinds and sizes: MLA KV pages "
        "(page_size tokens each, more of them as the sequence grows), KDA state slots (one fixed-size "
        "unit per request) and prefix-cache checkpoint slots. The pool accounts for each kind, and "
        "the prefix cache must keep them describing the same token boundaries.",
        "混合模型的缓存内存中有不同种类、不同大小的单元：MLA KV 页（每页 page_size 个 token，随序列增长"
        "而增多）、KDA 状态槽位（每个请求一个固定大小的单元）以及前缀缓存的 checkpoint 槽。内存池分别核算每"
        "种单元，前缀缓存必须让它们描述相同的 token 边界。",
        "kda_ref.memory.pool.PageKind",
        sg(_POOL, "HybridLinearKVPool", _C_YZ,
           "KV of the full-attention (MLA) layers only; MambaPool holds the states", repo=_FORK_YZ),
        vl(_VKVIF, "KVCacheSpec", _C_VKVIF, "one spec per KV cache group: MLAAttentionSpec, MambaSpec"),
    ),
    _c(
        "memory.unified_pool", "5.5",
        "Unified memory pool", "统一内存池",
        "Instead of fixing at start-up how many bytes go to KV pages and how many to state slots, all "
        "kinds draw from one byte budget, so the split follows the workload: many short requests need "
        "slots, a few long ones need pages. SGLang's opt-in UnifiedKVPool grows two sub-pools from "
        "opposite ends of one buffer (MHA + mamba sub-pools in the version read; an MLA sub-pool appears "
        "only in newer trees); vLLM pads pages so that a state and a KV page have the same size and one "
        "block pool serves both.",
        "不在启动时固定多少字节给 KV 页、多少给状态槽位，而是让所有种类共用一个字节预算，使划分随负载变化："
        "大量短请求需要状态槽位，少量长请求需要页。SGLang 可选的 UnifiedKVPool 让两个子池从同一缓冲区的两端相向增长"
        "（所读版本中只有 MHA 和 mamba 子池；MLA 子池只出现在更新的版本中）；vLLM 则填充页的大小，使一个状态与一个 "
        "KV 页大小相同，由同一个块池同时服务。",
        "kda_ref.memory.pool.UnifiedMemoryPool",
        sg("mem_cache/unified_memory_pool.py", "UnifiedKVPool", "014915306e932331eee33ce7e1f9b89f7267fc95",
           "one uint8 buffer, two sub-pools growing from opposite ends"),
        vl("model_executor/models/config.py", "HybridAttentionMambaModelConfig.verify_and_update_config",
           "1936cf3841edb9781b06c50fc4daf4bac9d3b23e",
           "raises the attention block size until a page holds a state, pads the mamba page to equal (newer "
           "trees: Platform._align_hybrid_block_size)"),
    ),
    # ---- the KDA-aware radix tree ------------------------------------------------------------------------------
    _c(
        "sglang.radix.kda_aware", "3.2, 5.1",
        "KDA-aware radix tree", "感知 KDA 的 Radix 树",
        "A radix tree whose nodes hold the KV of a token span and, optionally, one KDA state at exactly the "
        "node's end boundary. KV exists for every token; a state only where one was saved.",
        "Radix 树的节点保存一段 token 的 KV，并可选地在该节点的结束边界处保存一个 KDA 状态。KV 对每个 token 都存在；"
        "状态只存在于被保存过的位置。",
        "kda_ref.cache.radix.RadixTree",
        sg(_MRC, "MambaRadixCache", _C_MRC, "TreeNode.value (KV indices) and mamba_value (one slot or None); two LRU lists"),
        vl(_VSTKV, "MambaManager.find_longest_cache_hit", _C_VSTKV, "block-hash cache instead of a tree; a state only in "
           "some blocks"),
    ),
    _c(
        "sglang.radix.match_backoff", "5.1, 6.10",
        "Match, then back off to a state", "先匹配，再回退到有状态的节点",
        "Matching walks the KV path as in any prefix cache, then backs off to the deepest node that carries a "
        "state; the KV beyond it cannot be used without recomputing from that state. The last chunk-aligned "
        "position of the KV hit without a state is reported as the branching point, where the coming prefill "
        "can save a checkpoint.",
        "匹配时先像普通前缀缓存一样沿 KV 路径走，然后回退到最深的带状态节点；其后的 KV 不能直接使用，必须从该状态重算。"
        "KV 命中范围内最后一个没有状态的 chunk 对齐位置作为分叉点返回，接下来的 prefill 可以在那里保存 checkpoint。",
        "kda_ref.cache.radix.RadixTree.match_prefix",
        sg(_MRC, "MambaRadixCache._match_prefix_helper", _C_MRC,
           "best_last_node, mamba_branching_seqlen (newer trees move this into _match_post_processor)"),
        vl(_VSTKV, "MambaManager.find_longest_cache_hit", _C_VSTKV, "right to left: the last cached state block wins"),
    ),
    _c(
        "sglang.radix.tombstone", "5.1, 6.6",
        "Tombstones: KV without a state", "墓碑节点：有 KV 没有状态",
        "A node whose state was evicted, or that was created by splitting an edge, keeps its KV but has no "
        "state: a tombstone. Splitting never invents a state. A tombstone leaf is useless and is deleted, in "
        "cascade up the tree.",
        "状态被驱逐的节点，或由切分边产生的节点，保留 KV 但没有状态，称为墓碑节点。切分绝不会凭空产生状态。"
        "墓碑叶子没有用处，会沿树向上级联删除。",
        "kda_ref.cache.radix.RadixTree.evict_states",
        sg(_MRC, "MambaRadixCache._split_node", _C_MRC,
           "new_node.mamba_value = None; evict_mamba tombstones internal nodes, _iteratively_delete_tombstone_leaf"),
        None,
    ),
    _c(
        "sglang.cow_snapshot_donate", "4.3, 5.4, 6.7",
        "Copy-on-write, snapshot and donate", "写时复制、快照与捐赠",
        "An active state is updated in place by every step, so it is never shared. A cache hit copies the "
        "checkpoint into a fresh active slot (copy-on-write); between prefill chunks a state is copied into a "
        "new checkpoint (snapshot); a finished request hands a slot to the cache without copying (donate) — "
        "its working slot (no_buffer) or the track slot holding its last tracked state (extra_buffer).",
        "活动状态每一步都会被原地更新，因此绝不共享。缓存命中时把 checkpoint 复制到新的活动槽位（写时复制）；prefill 的 "
        "chunk 之间把一个状态复制成新的 checkpoint（快照）；请求结束时把一个槽位直接交给缓存，不做复制（捐赠）——"
        "no_buffer 下是它的工作槽，extra_buffer 下是保存最后一次跟踪状态的跟踪槽。",
        "kda_ref.cache.radix.RadixPrefixCache",
        sg(_MRC, "MambaRadixCache.cache_finished_req", _C_MRC,
           "match_prefix copies with copy_from (COW); cache_unfinished_req forks (snapshot); cache_finished_req "
           "inserts the working slot or the kept ping-pong slot (donate)"),
        None,
    ),
    _c(
        "sglang.boundary_consistency", "4.2, 6.10",
        "Boundary consistency", "边界一致性",
        "A restored prefix is three things that must describe exactly the same token boundary: the KDA "
        "recurrent state, the short-conv windows (the last W-1 inputs before the boundary) and the MLA KV of "
        "the tokens before it. SGLang and vLLM guarantee it by construction (the tracked state and the conv "
        "window are taken at the same position); this project also records each checkpoint's boundary and "
        "checks it before every restore, because a state from another boundary changes the answer silently.",
        "恢复一个前缀时，有三样东西必须描述完全相同的 token 边界：KDA 递推状态、短卷积窗口（边界之前的最后 W-1 个输入）"
        "以及边界之前各 token 的 MLA KV。SGLang 和 vLLM 靠构造来保证这一点（跟踪的状态和卷积窗口取自同一位置）；本项目"
        "还为每个 checkpoint 记录其边界并在每次恢复前检查，因为取自另一个边界的状态会悄无声息地改变答案。",
        "kda_ref.cache.radix.RadixPrefixCache.check_boundary",
        sg(_HYB, "MambaAttnBackendBase._init_track_ssm_indices", _C_HYB,
           "the tracked state is h at the cache boundary; _init_track_conv_indices gathers the conv window ending "
           "at the same position"),
        vl("model_executor/layers/mamba/ops/ssu_dispatch.py", "mamba_state_copy_boundary", _C_VSTKV,
           "returns whether a step's accepted tokens reach a block boundary, that boundary's offset in the "
           "run (accept_token_bias) and the destination block; _postprocess_replayssm_kernel (same file, read at "
           "commit 00b08dc4) plans the copy of exactly that boundary's state -- source and destination slot tables, "
           "ring start, flush count -- and FlashInfer's replayssm_materialize (ReplaySSMModelContext.materialize) "
           "copies it"),
    ),
    _c(
        "sglang.checkpoint_policy", "5.2, 9.2",
        "Where to keep checkpoints", "checkpoint 放在哪里",
        "Every checkpoint is a whole state, so a cache cannot keep one per chunk for long. SGLang's "
        "extra_buffer strategy tracks at most one state per prefill step (the last chunk multiple from the "
        "step's start, or the branching point its match reported) and one per --mamba-track-interval decoded "
        "tokens (256), in two ping-pong track slots per request; its no_buffer strategy snapshots the working "
        "state after each unfinished prefill chunk and donates the end. vLLM keeps states on its block grid and "
        "retains all, every N, or only reachable boundaries.",
        "每个 checkpoint 都是一个完整的状态，因此缓存无法长期为每个 chunk 保留一个。SGLang 的 extra_buffer 策略每个 "
        "prefill 步最多跟踪一个状态（从该步起点算起的最后一个 chunk 倍数，或匹配报告的分叉点），decode 时每 "
        "--mamba-track-interval（256）个 token 跟踪一个，保存在每个请求的两个乒乓跟踪槽中；no_buffer 策略则在每个未完成"
        "的 prefill 分块之后为工作状态做快照，并在结束时捐出最终状态。vLLM 把状态放在块网格上，保留全部、每 N 个或只保留"
        "可达边界。",
        "kda_ref.cache.radix.policies.SGLangPolicy.snapshot",
        sg("managers/schedule_batch.py", "ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend", _C_BBUF,
           "tracked = prefix + (extend_len // chunk) * chunk, or mamba_branching_seqlen; prepare_for_decode tracks "
           "seq_lens % mamba_track_interval == 0", repo=_FORK_BBUF),
        vl(_VSTKV, "MambaManager.reachable_block_mask", _C_VSTKV,
           "None = dense, 0 = reachable boundaries only, N > 0 = one state per segment of N tokens"),
    ),
    _c(
        "sglang.track_interval", "5.2, 9.2",
        "The decode tracking interval", "decode 跟踪间隔",
        "While a request decodes, SGLang (extra_buffer) copies its state into a track slot whenever the "
        "sequence length is a multiple of --mamba-track-interval (256 by default; a multiple of the page size "
        "and at least the number of draft tokens). Only the last tracked state is kept at finish, so a "
        "follow-up turn resumes up to 255 tokens before the end of the previous answer.",
        "请求 decode 时，每当序列长度是 --mamba-track-interval（默认 256；须是页大小的倍数且不小于草稿 token 数）的倍数，"
        "SGLang（extra_buffer）就把它的状态复制到一个跟踪槽中。结束时只保留最后一次跟踪的状态，因此下一轮对话最多要从上一个"
        "回答末尾之前 255 个 token 处继续。",
        "kda_ref.cache.radix.policies.SGLangPolicy._track_decode",
        sg("server_args.py", "ServerArgs.mamba_track_interval", _C_YZ, "mamba_track_interval: int = 256",
           repo=_FORK_YZ),
        None,
    ),
    _c(
        "sglang.compressed_checkpoint", "5.3",
        "Compressed checkpoints", "压缩 checkpoint",
        "Cached states sit idle until a hit, so they can be stored smaller than the active fp32 states: bf16, "
        "or int8 with one scale per head and key channel. A hit dequantizes into a fresh active slot. More "
        "states fit in the same memory, at the price of a small drift.",
        "缓存的状态在命中之前一直闲置，因此可以比活动的 fp32 状态存得更小：bf16，或每个 head、每个 key 通道一个 "
        "scale 的 int8。命中时反量化到新的活动槽位。同样的内存能放下更多状态，代价是少量数值漂移。",
        "kda_ref.memory.checkpoint_store.CompressedCheckpoints",
        sg("mem_cache/mamba_checkpoint_pool.py", "MambaCheckpointPool.store_from_active",
           "b03febbe34a1a7d2198933bde2ee51033e96681a",
           "int8 temporal state, scale = amax over d_v of |S| / 127; conv windows kept in their dtype; opt-in "
           "--enable-int8-mamba-checkpoint"),
        None,
    ),
    _c(
        "swa.vs_kda", "9.1",
        "Why SWA checkpointing does not carry over", "为什么 SWA 的 checkpoint 方法不能用于 KDA",
        "A sliding-window layer's cache at position t is the KV of the last W tokens: independent per-token "
        "records that any longer cached KV contains, so a hit can be assembled at any position where a "
        "W-token run survives and older tokens can be freed one by one. A KDA state at t is one folded matrix "
        "that exists only if it was saved at t; it cannot be cut out of a later state or split with a node.",
        "滑动窗口层在位置 t 的缓存是最近 W 个 token 的 KV：彼此独立的逐 token 记录，任何更长的缓存 KV 都包含它们，"
        "因此只要一段 W 个 token 的 KV 还在，就能在任意位置拼出命中，更早的 token 也能逐个释放。KDA 在 t 处的状态是一个"
        "折叠后的矩阵，只有在 t 处保存过才存在；它既不能从之后的状态中截取出来，也不能随节点切分。",
        "model_viz.scenarios.swa_vs_kda.run",
        sg("mem_cache/swa_radix_cache.py", "SWARadixCache._match_prefix_helper",
           "5e24d55a9370d1f482ddbcb6a1f9e2e5dab62c99",
           "a hit needs the last sliding_window_size tokens' SWA KV; older nodes may be SWA tombstones"),
        vl(_VSTKV, "SlidingWindowManager.find_longest_cache_hit", "129ab7c60cbb8eb11e875373e67f7e521b74aa30",
           "needs cdiv(window - 1, block_size) contiguous cached blocks; the blocks before them are null"),
    ),
    # ---- vLLM's state blocks --------------------------------------------------------------------------------------
    _c(
        "vllm.block_hash", "7",
        "Chained block hashes", "链式块哈希",
        "vLLM names a prefix by hashing blocks in a chain: each hash covers the parent's hash and this block's "
        "tokens, so one hash names the whole prefix up to that block. Hashes are taken per small hash unit (the "
        "prefix-match unit), finer than the physical state blocks; a block is named by the hash of its last unit.",
        "vLLM 用链式哈希命名前缀：每个哈希包含父块的哈希和本块的 token，因此一个哈希就代表到该块为止的整个前缀。"
        "哈希按较小的哈希单元（前缀匹配单元）计算，比物理状态块更细；一个块由其最后一个单元的哈希命名。",
        "kda_ref.cache.block.chain_hashes",
        sg("mem_cache/radix_cache.py", "RadixCache.match_prefix", "95769b280eaaf946a45dd3b50f7e864df09ac893",
           "SGLang matches token keys in a radix tree; it does not hash blocks to match"),
        vl("v1/core/kv_cache_utils.py", "hash_block_tokens", "bbf906a88ba1a39104884c88c9811a4f968e4659",
           "hash of (parent hash, block tokens, extra keys); the hash unit can be finer than the block"),
    ),
    _c(
        "vllm.hybrid_hit", "7, 8",
        "The hybrid hit is a fixed point", "混合命中是一个不动点",
        "A hit must hold in every cache group. Start from the longest candidate; the full-attention group scans "
        "left to right and may shrink it, the state group searches right to left for the last block holding a "
        "state at or before it and may shrink it again; repeat until no group shrinks it.",
        "命中必须在每个缓存组里同时成立。从最长的候选长度开始：全注意力组从左到右扫描并可能缩短它，状态组从右到左"
        "寻找不超过该长度、且存有状态的最后一个块，并可能再次缩短；反复进行，直到没有任何组再缩短它。",
        "kda_ref.cache.block.BlockHashTable.find_longest_cache_hit",
        sg(_MRC, "MambaRadixCache.match_prefix", _C_MRC, "walk the KV path, back off to the deepest node holding a state"),
        vl("v1/core/kv_cache_coordinator.py", "HybridKVCacheCoordinator.find_longest_cache_hit", _C_VSTKV,
           "groups sorted full attention first; iterate until the hit length stops shrinking"),
    ),
    _c(
        "vllm.state_block", "7, 8",
        "State blocks: logical prefix, physical state", "状态块：逻辑前缀与物理状态",
        "In the state group a block holds the recurrent and conv state at the block's end. A request's block table "
        "lists its whole logical prefix, but only the last hit block is a real state; the blocks before it are "
        "null. In align mode the hit state is copied into the request's running block before the step; a "
        "partial-block hit takes a private copy (copy-on-write).",
        "在状态组里，一个块保存该块末尾处的递推状态和卷积状态。请求的块表列出其完整的逻辑前缀，但只有最后一个命中的块"
        "是真实状态，之前的块都是空块。align 模式下，命中的状态在该步之前被复制到请求的运行块中；块内部分命中则获得一份"
        "私有副本（写时复制）。",
        "kda_ref.cache.block.BlockPrefixCache.admit",
        sg(_MRC, "MambaRadixCache.match_prefix", _C_MRC, "one state per radix node instead of one per block"),
        vl(_VSTKV, "MambaManager.find_longest_cache_hit", _C_VSTKV, "computed = [null_block] * i + [cached]"),
    ),
    _c(
        "vllm.state_block.partial_hit", "8",
        "Fine-grained partial hits", "细粒度部分命中",
        "With a hash unit finer than the state block, a state can also be cached at a unit boundary inside a block: "
        "at the prompt's last hash boundary and at shared-prefix junctions. A later request whose shared prefix "
        "ends inside a block can then resume there, through a private copy of that state.",
        "当哈希单元比状态块更细时，状态也可以缓存在块内部的单元边界上：提示词的最后一个哈希边界，以及共享前缀的分叉处。"
        "之后共享前缀止于块内部的请求就能从那里继续，使用该状态的私有副本。",
        "kda_ref.cache.block.BlockPrefixCache.admit",
        sg(_MRC, "MambaRadixCache._match_prefix_helper", _C_MRC,
           "mamba_branching_seqlen: the branching point is checkpointed during the coming prefill"),
        vl(_VSTKV, "MambaManager._cache_partial_tail_block", _C_VSTKV,
           "align mode: a partial entry at the prompt's last hash boundary; consumers get a cow_block "
           "(FullAttentionManager has the KV-side twin)"),
    ),
    _c(
        "vllm.mamba_cache_mode", "7, 9.2",
        "mamba_cache_mode: all vs align", "mamba_cache_mode：all 与 align",
        "'all' caches the state at every block boundary. 'align' caches only where a scheduler step ends on a "
        "block boundary; the scheduler aligns prefill chunks to blocks and forces the chunk that ends on the last "
        "cacheable block. SGLang's counterpart is its mamba strategy: no_buffer or extra_buffer.",
        "'all' 在每个块边界缓存状态。'align' 只在调度步恰好结束于块边界时缓存；调度器把 prefill 分块对齐到块，"
        "并强制让一个分块结束在最后一个可缓存的块上。SGLang 中与之对应的是它的 mamba 策略：no_buffer 或 extra_buffer。",
        "kda_ref.cache.block.BlockPrefixCache.align_chunk",
        sg("server_args.py", "ServerArgs.mamba_radix_cache_strategy", "2a65921a59d7da5637e50c37d2c49da14eb9aebf",
           "auto | no_buffer | extra_buffer | extra_buffer_lazy (older name: mamba_scheduler_strategy)",
           repo="JiaruiChang5268/sglang"),
        vl("v1/core/sched/prefill_chunk_alignment.py", "MambaPrefillChunkAlignmentPolicy.align_scheduled_tokens",
           "9dc587caa994a49b7fa7dd558eb2cfff835700cc",
           "align chunks to block_size; force the chunk that ends on the last cacheable position"),
    ),
    _c(
        "vllm.retention", "9.2",
        "Retention: dense, interval, reachable", "保留策略：稠密、间隔、可达",
        "Which of the produced states to keep. Dense keeps all; an interval keeps one per N tokens; interval 0 "
        "keeps only reachable boundaries: the replay boundary (vLLM: the prompt's last token, aligned down) and "
        "shared-prefix junctions (Marconi's branch-off points). This project's block cache also holds the last "
        "boundary a request passed as one pending state, committed at finish (replay_granularity).",
        "决定保留哪些已产生的状态。稠密保留全部；间隔每 N 个 token 保留一个；间隔 0 只保留可达边界：重放边界（vLLM 中是"
        "提示词最后一个 token，向下对齐）和共享前缀的分叉点（Marconi 的分支点）。本项目的块缓存还把请求经过的最后一个边界"
        "作为一个待定状态持有，在结束时提交（replay_granularity）。",
        "kda_ref.cache.block.retention_mask",
        sg("mem_cache/unified_cache/components/mamba.py", "MambaComponent._evict_excess_path_states",
           "b8f746689da41b53eed33c0ddce610f09215b7e4",
           "mamba_max_states_per_path: a per-path cap instead of an interval"),
        vl(_VSTKV, "MambaManager.reachable_block_mask", _C_VSTKV,
           "reachable boundaries from cache_blocks: num_prompt_tokens - 1 and request.shared_prefix_boundary"),
    ),
    _c(
        "vllm.block_eviction", "7, 9.2",
        "Block eviction (LRU)", "块淘汰（LRU）",
        "Cached blocks with no running user are evicted least recently used first. vLLM frees a request's "
        "blocks tail first, so tail blocks tend to go first, but it does not forbid evicting a middle block (the "
        "hashes after it then become unreachable). This project evicts KV only at leaves, as SGLang does; a "
        "state can be dropped anywhere while its KV stays.",
        "没有运行中请求使用的缓存块按最近最少使用的顺序淘汰。vLLM 从尾部开始释放请求的块，所以尾部的块往往先被淘汰，"
        "但它并不禁止淘汰中间的块（其后的哈希随之不可达）。本项目和 SGLang 一样只从叶子淘汰 KV；状态则可以在任何位置丢弃，"
        "而其 KV 保留。",
        "kda_ref.cache.block.BlockHashTable.evict_until",
        sg(_MRC, "MambaRadixCache.evict_mamba", _C_MRC, "mamba LRU: internal nodes tombstoned, leaves deleted"),
        vl("v1/core/block_pool.py", "BlockPool.get_new_blocks", "c59cb7941357443da7c5eef75cfa8697d683d228",
           "popleft from the free queue (LRU), then _maybe_evict_cached_block drops the hash"),
    ),
    _c(
        "marconi.eviction", "9.2",
        "Marconi's eviction utility", "Marconi 的淘汰效用",
        "Marconi evicts among entries with at most one child the one with the lowest utility alpha * norm(FLOPs "
        "saved per byte) + norm(recency). A state far from its parent state saves much prefill for its bytes; a "
        "branch point is never a candidate. Neither SGLang nor vLLM merged it; both evict by LRU.",
        "Marconi 在至多有一个子节点的条目中淘汰效用最低者：效用 = alpha * 归一化(每字节节省的 FLOPs) + 归一化(新近度)。"
        "离父状态很远的状态以其字节换来大量 prefill 节省；分叉点永远不是候选。SGLang 和 vLLM 都没有合并它，二者都按 LRU "
        "淘汰。",
        "kda_ref.cache.block.BlockHashTable.marconi_order",
        missing("--radix-eviction-policy marconi", "SGLang PRs #17898 and #21862 proposed it; both closed unmerged"),
        vl(_VSTKV, "MambaManager.reachable_block_mask", _C_VSTKV,
           "vLLM took Marconi's admission side (retain reachable junctions); eviction stays LRU"),
        marconi=missing("evict_v2", "Marconi's own simulator (github.com/ruipeterpan/marconi); the repository "
                        "could not be read here, the rule follows the Marconi paper (MLSys 2025)"),
    ),
    _c(
        "marconi.alpha_tuning", "9.2",
        "Tuning alpha on a bootstrap window", "在自举窗口上调节 alpha",
        "After the first eviction, the next 5x (requests seen so far) requests form a bootstrap window. When it has "
        "passed, it is replayed from the same starting point for every alpha of a grid, and the alpha that saved "
        "the most prefill FLOPs (not the best hit rate) is kept.",
        "第一次淘汰之后，接下来 5 倍（已见请求数）的请求构成自举窗口。窗口结束时，从同一起点对网格中的每个 alpha 重放"
        "该窗口，保留节省 prefill FLOPs 最多（而不是命中率最高）的 alpha。",
        "kda_ref.sim.simulator.tune_alpha",
        missing("marconi_tuner", "SGLang PR #21862 (closed, unmerged) carried a tuner"),
        None,
        marconi=missing("ConfigTuner.tune_config", "Marconi's own simulator; the repository could not be read here, "
                        "the procedure follows the Marconi paper"),
    ),
    _c(
        "cache.checkpoint_density", "9.2",
        "The checkpoint-density dilemma", "checkpoint 密度的两难",
        "One 48B state (41.4 MiB) weighs as much as ~5,400 tokens of MLA KV. Dense checkpoints cost far more memory "
        "than the KV they accompany; sparse ones save memory but a hit resumes only from the last checkpoint before "
        "the shared prefix, recomputing the rest. Policies are compared by FLOPs saved per byte.",
        "一个 48B 模型的状态（41.4 MiB）相当于约 5,400 个 token 的 MLA KV。稠密的 checkpoint 占用的内存远多于其对应的 "
        "KV；稀疏的 checkpoint 省内存，但命中只能从共享前缀之前的最后一个 checkpoint 继续，其余部分需要重算。"
        "各策略以每字节节省的 FLOPs 来比较。",
        "kda_ref.cache.cost.CostModel",
        sg("server_args.py", "ServerArgs.mamba_track_interval", _C_YZ, "one tracked state per 256 decoded tokens",
           repo=_FORK_YZ),
        vl("config/cache.py", "CacheConfig.mamba_cache_mode", "002f10e0cfa1373a19a0d2756598a34b700d20e5",
           "'all' caches every block, 'align' only at step ends; prefix_cache_retention_interval defaults to 0"),
    ),
    # ---- serving -----------------------------------------------------------------------------------------
    _c(
        "server.engine_loop", "0",
        "One loop owns the engine; clients cross a queue", "一个循环独占引擎；客户端经队列交接",
        "A server runs many clients against one engine that is not thread-safe. One loop owns every engine "
        "step; HTTP handlers only queue requests into it and read each request's tokens back as steps add "
        "them. A client that disconnects has its request aborted at the next step, so its state slots and "
        "KV pages return to the memory pool at once; admission is bounded (past it: 503 with Retry-After, "
        "as SGLang's --max-queued-requests and vLLM's --max-num-queued-reqs answer; ours counts requests not "
        "yet running, vLLM's every request in flight, waiting or running), so a burst never grows an "
        "unbounded queue.",
        "服务器让许多客户端共用一个非线程安全的引擎。一个循环独占引擎的每一步；HTTP 处理函数只把请求放进队列，"
        "并在每一步产生 token 时把它们读回。断开连接的客户端，其请求在下一步被中止，状态槽位和 KV 页立即归还内存池；"
        "准入有上限（超过时返回 503 和 Retry-After，与 SGLang 的 --max-queued-requests、vLLM 的 "
        "--max-num-queued-reqs 一样；本项目只计尚未运行的请求，vLLM 计所有在途请求，包括等待和运行中的），"
        "突发流量不会让队列无限增长。",
        "kda_ref.server.loop.EngineLoop",
        sg("entrypoints/http_server.py", "generate_request", "9c0549b727fe222444495cea6b369697534d60f0",
           "a streaming /generate response runs tokenizer_manager.create_abort_task(obj) in the background: "
           "a client that left is aborted"),
        vl("v1/engine/async_llm.py", "AsyncLLM.generate", "8ef0b5f50994abaef30bca67b5ec167e5187b99b",
           "on asyncio.CancelledError / GeneratorExit (the client disconnected): await self.abort(request_id)"),
    ),
    _c(
        "server.engine_process", "0",
        "The engine in a process of its own", "引擎在独立进程中运行",
        "Two threads of one Python process share one GIL: with the engine as a thread of the HTTP server, "
        "every streamed token woke the event loop, whose Python then held the GIL while the engine waited "
        "for it. kda-ref serve runs the engine loop in a process of its own; the HTTP server's process sends "
        "each request over a pipe (the engine process checks it and answers at once) and reads each step's "
        "tokens back, and /metrics and the live trace are calls into that process. An engine process that "
        "dies ends every open stream with an error and turns /health to 503; one that freezes is noticed by "
        "its heartbeat (server.heartbeat). vLLM and SGLang run their engines the same way, over ZMQ.",
        "同一个 Python 进程的两个线程共享一把 GIL：引擎作为 HTTP 服务器的一个线程时，每个流式 token 都会唤醒事件循环，"
        "事件循环的 Python 代码持有 GIL，引擎只能等待。kda-ref serve 让引擎循环运行在独立进程中；HTTP 服务器进程通过"
        "管道发送每个请求（引擎进程检查后立即答复），并读回每一步的 token；/metrics 和 live trace 都是对该进程的调用。"
        "引擎进程一旦退出，所有打开的流都以错误结束，/health 变为 503；冻结的引擎进程由心跳察觉（server.heartbeat）。"
        "vLLM 和 SGLang 也这样运行引擎，通过 ZMQ 通信。",
        "kda_ref.server.core_client.EngineCoreClient",
        sg("managers/tokenizer_manager.py", "TokenizerManager.init_ipc_channels",
           "001067fffe33427bee0ed2f007fb7551a1d76b44",
           "send_to_scheduler: a ZMQ PUSH socket to the scheduler process (with one tokenizer worker, the "
           "default); results come back from the detokenizer process on a PULL socket (recv_from_detokenizer)"),
        vl("v1/engine/core_client.py", "AsyncMPClient", "00080ee13c7a451fce071ccb8d0e94d395acf5a7",
           "requests go to EngineCoreProc over a ZMQ input socket; an asyncio task of the API server reads the "
           "output socket (output_queue_task); utility calls via call_utility_async; EngineDeadError once the "
           "engine process is gone"),
    ),
    _c(
        "server.heartbeat", "0",
        "A frozen engine is noticed", "察觉冻结的引擎",
        "A crashed engine process ends its pipe; a frozen one (stopped, a long GC, a swap storm) keeps it open "
        "and says nothing. The engine process beats a few times a second from a thread of its own; after "
        "--engine-heartbeat-timeout seconds of silence the server calls it unresponsive: /health 503, new "
        "requests 503 at once, open streams ended with an error, /metrics answered from the HTTP side. Its "
        "requests are cancelled over the pipe before any client hears, and the engine, when it runs again, "
        "drops what it was told to before another step: a request a client was told failed never runs on. "
        "Upstream, SGLang's health_generate waits up to 20 s for any reply from the scheduler; vLLM's "
        "check_health fails only once the engine is known dead.",
        "崩溃的引擎进程会让管道断开；冻结的引擎进程（被 SIGSTOP、长时间 GC、内存换页风暴）管道仍然开着，却一言不发。"
        "引擎进程用一个独立线程每秒发送几次心跳；连续 --engine-heartbeat-timeout 秒听不到任何消息，服务器就判定它"
        "无响应：/health 返回 503，新请求立即得到 503，打开的流以错误结束，/metrics 由 HTTP 一侧回答。在任何客户端"
        "得知之前，这些请求先经管道被取消；引擎恢复运行后，在下一步之前丢弃它们：客户端被告知失败的请求不会再运行。"
        "上游中，SGLang 的 health_generate 最多等 20 秒等待 scheduler 的任何回复；vLLM 的 check_health 只在已知引擎"
        "死亡时才失败。",
        "kda_ref.server.heartbeat.Heartbeat",
        sg("entrypoints/http_server.py", "health_generate", "9c0549b727fe222444495cea6b369697534d60f0",
           "sends a one-token request and answers 503 unless tokenizer_manager.last_receive_tstamp moves within "
           "HEALTH_CHECK_TIMEOUT (20 s); the scheduler's own watchdog (utils/watchdog.py, WatchdogRaw) runs "
           "inside the scheduler process"),
        vl("v1/engine/async_llm.py", "AsyncLLM.check_health", "8ef0b5f50994abaef30bca67b5ec167e5187b99b",
           "raises only when the engine is errored (dead); a live engine core that stopped answering passes"),
    ),
    _c(
        "kv_events.blocks", "3.2, 7.1",
        "A prefix cache on the KV-event wire", "KV 事件线路上的前缀缓存",
        "vLLM and SGLang publish their prefix caches over ZMQ for KV-aware routers: BlockStored when a block "
        "of tokens becomes reusable, BlockRemoved when it is evicted, AllBlocksCleared on a reset, each block "
        "named by a chained hash of its whole prefix. kda-ref serve --kv-events-config speaks the same wire. A "
        "hybrid cache needs two groups: the MLA KV blocks (any full block along a cached path) and the KDA "
        "states (a block whose end carries a checkpoint: sparse, and in the radix tree often a partial block "
        "ending at a prompt's end or a branch point). vLLM tags them mla_attention and mamba; SGLang sends "
        "no events for state checkpoints. kda-ref watch and the Live page rebuild the forest from any of the "
        "three servers.",
        "vLLM 和 SGLang 通过 ZMQ 为感知 KV 的路由器发布它们的前缀缓存：一个 token 块变为可复用时发 BlockStored，"
        "被驱逐时发 BlockRemoved，重置时发 AllBlocksCleared，每个块用覆盖其整个前缀的链式哈希命名。kda-ref serve "
        "--kv-events-config 使用同样的线路格式。混合缓存需要两个组：MLA KV 块（缓存路径上的任意完整块）和 KDA 状态"
        "（末尾带 checkpoint 的块：稀疏，在基数树中常常是止于提示词末尾或分叉点的不完整块）。vLLM 把它们标为 "
        "mla_attention 和 mamba；SGLang 不为状态 checkpoint 发布事件。kda-ref watch 和实时页面可以从这三种服务器"
        "中的任何一种重建前缀森林。",
        "kda_ref.kv_events.index.diff",
        sg("disaggregation/kv_events.py", "ZmqEventPublisher", "612d579090db24ec7c47cc5ca6b83e0c649b8c28",
           "BlockStored / BlockRemoved / AllBlocksCleared as positional arrays tagged by class, batches "
           "[ts, events, attn_dp_rank], port + dp rank; the replay ROUTER answers [seq, payload] then END_SEQ "
           "(0.5.23 sends tagged maps and repeats the topic)"),
        vl("distributed/kv_events.py", "ZmqEventPublisher", "b4e69e0af33f4698e157a262cc787fe61983cd3d",
           "PUB bound for * / :: / ipc / inproc else connected; replay ROUTER takes an 8-byte start sequence "
           "and answers every buffered batch, then END_SEQ = -1; 0.32.0 adds group_idx and "
           "kv_cache_spec_kind and sends events as maps tagged by type"),
    ),
    _c(
        "server.openai_api", "0",
        "The OpenAI-compatible server and its metrics", "OpenAI 兼容服务器及其指标",
        "Real clients and load generators speak OpenAI's HTTP API: /v1/completions and /v1/chat/completions, "
        "whole or streamed as server-sent events, errors as OpenAI's error object. Stop strings are found in "
        "the detokenised text (the engine stops on token ids). /metrics exports Prometheus counters and "
        "histograms named as vLLM names its own (running and waiting requests, prefix-cache hits, TTFT, "
        "TPOT, e2e latency), which a load benchmark can check its client-side numbers against.",
        "真实的客户端和压测工具使用 OpenAI 的 HTTP API：/v1/completions 和 /v1/chat/completions，整体返回或以 "
        "server-sent events 流式返回，错误使用 OpenAI 的错误对象。停止字符串在反 token 化后的文本中查找（引擎按 "
        "token id 停止）。/metrics 导出 Prometheus 计数器和直方图，命名方式与 vLLM 相同（运行和等待的请求、"
        "前缀缓存命中、TTFT、TPOT、端到端时延），压测可以用它核对客户端测得的数字。",
        "kda_ref.server.app.Server",
        sg("entrypoints/http_server.py", "openai_v1_completions", "9c0549b727fe222444495cea6b369697534d60f0",
           "POST /v1/completions; launch_server adds add_api_key_middleware when --api-key is set"),
        vl("v1/metrics/loggers.py", "PrometheusStatLogger", "a6f0308cfe806b7731ad4979c9bea6e470c35efd",
           "vllm:num_requests_running, vllm:time_to_first_token_seconds, vllm:gpu_prefix_cache_hits at this "
           "commit (vLLM 0.34.0: vllm:prefix_cache_hits, vllm:inter_token_latency_seconds)"),
    ),
]
