"""The concept map: every idea of the source article, with where it lives in code.

One source of truth, as data. Each :class:`Concept` has a stable id (the ids that engine
docstrings and trace events use), a title and a short explanation in English and Chinese, the
article section, *our* implementation as an importable dotted path, and its counterparts in SGLang
and vLLM (and flash-linear-attention where the kernel comes from there). Pages, docs and tests read
this module; nothing else keeps a copy.

Provenance of the external pointers. Each :class:`SourceRef` names a file and a symbol and says in
``note`` where the pointer was checked:

* "read @<commit>" -- the file was read at that commit of the upstream repository
  (``sgl-project/sglang``, ``vllm-project/vllm``) and the symbol is in it;
* "research notes" -- taken from the project's research notes (``hybrid_cache.md``,
  ``kda_fla.md``), which quote the upstream file; not re-read here;
* a file of :data:`NOT_LOCATED` -- the counterpart exists conceptually but no file/function could
  be confirmed; never a guessed path.

``None`` means the engine has no counterpart for that concept.
"""

from __future__ import annotations

import importlib
import types
from dataclasses import dataclass

from .i18n import LANGS, t

NOT_LOCATED = "not located"


@dataclass(frozen=True)
class SourceRef:
    file: str  # path inside the upstream repository, or NOT_LOCATED
    symbol: str  # class / function / method, e.g. "KDAKernelDispatcher.decode"
    note: str = ""  # provenance: where / at which commit the pointer was checked
    detail: str = ""  # what to look at there, in a few words

    def label(self) -> str:
        if self.file == NOT_LOCATED:
            return f"{self.symbol} ({NOT_LOCATED})"
        return f"{self.file}::{self.symbol}"

    def __post_init__(self):
        if not self.file or not self.symbol:
            raise ValueError("SourceRef: file and symbol must be non-empty")


@dataclass(frozen=True)
class Concept:
    id: str
    section: str  # article section(s), e.g. "1.3, 2.2"
    title: dict  # lang -> str
    summary: dict  # lang -> str
    ours: str  # importable dotted path: module[.attr[.attr]]
    sglang: SourceRef | None
    vllm: SourceRef | None
    fla: SourceRef | None = None


_SG_KDA_BACKEND = "python/sglang/srt/layers/attention/linear/kda_backend.py"
_SG_KDA_TRITON = "python/sglang/srt/layers/attention/linear/kernels/kda_triton.py"
_SG_KIMI = "python/sglang/srt/models/kimi_linear.py"
_SG_POOL = "python/sglang/srt/mem_cache/memory_pool.py"
_SG_HYBRID_BACKEND = "python/sglang/srt/layers/attention/hybrid_linear_attn_backend.py"
_SG_RADIX_LA = "python/sglang/srt/layers/radix_linear_attention.py"
_VL_KDA = "vllm/model_executor/layers/kda.py"
_VL_FLA_KDA = "vllm/model_executor/layers/fla/ops/kda.py"
_VL_KV_IF = "vllm/v1/kv_cache_interface.py"
_VL_MAMBA_UTILS = "vllm/model_executor/layers/mamba/mamba_utils.py"

_SG_SCHED = "python/sglang/srt/managers/scheduler.py"
_SG_POLICY = "python/sglang/srt/managers/schedule_policy.py"
_SG_SCHED_BATCH = "python/sglang/srt/managers/schedule_batch.py"
_SG_UNIFIED_POOL = "python/sglang/srt/mem_cache/unified_memory_pool.py"
_VL_SCHED = "vllm/v1/core/sched/scheduler.py"
_VL_MODEL_CONFIG = "vllm/model_executor/models/config.py"
_VL_BACKEND_UTILS = "vllm/v1/attention/backends/utils.py"

_VL_COORD = "vllm/v1/core/kv_cache_coordinator.py"
_VL_SINGLE = "vllm/v1/core/single_type_kv_cache_manager.py"
_VL_ALIGN = "vllm/v1/core/sched/prefill_chunk_alignment.py"
_VL_CACHE_CFG = "vllm/config/cache.py"
_SG_MAMBA_RADIX = "python/sglang/srt/mem_cache/mamba_radix_cache.py"
_SG_UNIFIED_RADIX = "python/sglang/srt/mem_cache/unified_radix_cache.py"
_MARCONI = "Marconi (github.com/ruipeterpan/marconi), research notes (hybrid_cache.md section 4)"
_READ_SG_BACKEND = "read @0051ebfc (newer trees move the class to linear/kda_kernel_dispatcher.py, read @0fadea88)"
_READ_SG_TRITON = "read @007d1d93"
_READ_SG_KIMI = "read @0220422f"
_READ_VL_KDA = "read @01a7e5d9"
_RESEARCH = "research notes (hybrid_cache.md), not re-read here"
_READ_SG_SCHED = "read @0003215c"
_READ_VL_SCHED = "read @00024d31"


def _c(id, section, title_en, title_zh, en, zh, ours, sglang, vllm, fla=None) -> Concept:
    return Concept(id, section, {"en": title_en, "zh": title_zh}, {"en": en, "zh": zh}, ours, sglang, vllm, fla)


_CONCEPT_LIST = [
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
        SourceRef(_SG_KDA_TRITON, "TritonKDAKernel.decode", _READ_SG_TRITON,
                  "calls fused_sigmoid_gating_delta_rule_update(..., is_kda=True)"),
        SourceRef(_VL_KDA, "KimiDeltaAttention._forward", _READ_VL_KDA, "decode branch: fused_recurrent_kda"),
        SourceRef("fla/ops/kda/fused_recurrent.py", "fused_recurrent_kda", "research notes (kda_fla.md)"),
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
        SourceRef(_SG_KDA_TRITON, "TritonKDAKernel.decode", _READ_SG_TRITON,
                  "calls fused_sigmoid_gating_delta_rule_update(..., is_kda=True)"),
        SourceRef(_VL_KDA, "KimiDeltaAttention._forward", _READ_VL_KDA, "fused_recurrent_kda / chunk_kda"),
        SourceRef("fla/ops/kda/naive.py", "naive_recurrent_kda", "research notes (kda_fla.md)"),
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
        SourceRef(_SG_KIMI, "KimiDeltaAttention.forward", _READ_SG_KIMI,
                  "raw forget gate f_b_proj(f_a_proj(x)); the kernels apply A_log and dt_bias"),
        SourceRef(_VL_FLA_KDA, "fused_kda_gate", "imported by vllm/model_executor/layers/kda.py, " + _READ_VL_KDA,
                  "called from KimiDeltaAttention.forward"),
        SourceRef("fla/ops/kda/gate.py", "naive_kda_gate", "research notes (kda_fla.md)"),
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
        "kda_ref.inspect.trace_kda_states",
        SourceRef(_SG_KDA_TRITON, "TritonKDAKernel.target_verify", _READ_SG_TRITON,
                  "closest engine analogue: the state after every draft token, kept for verification"),
        SourceRef(_VL_KDA, "KimiDeltaAttention._forward", _READ_VL_KDA, "one state per sequence, updated in place"),
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
        SourceRef(_SG_KDA_TRITON, "TritonKDAKernel.extend", _READ_SG_TRITON, "calls chunk_kda"),
        SourceRef(_VL_KDA, "KimiDeltaAttention._forward", _READ_VL_KDA, "prefill branch: chunk_kda"),
        SourceRef("fla/ops/kda/chunk.py", "chunk_kda", "research notes (kda_fla.md)"),
    ),
    _c(
        "kda.chunk_checkpoints", "5.2, 6.8",
        "Chunk-start states as free checkpoints", "块起点状态即免费的 checkpoint",
        "The chunk kernel computes the state at the start of every chunk anyway; returning those "
        "states costs nothing extra. A prefix cache can keep them as checkpoints at chunk-aligned "
        "positions, so a later request can resume there instead of recomputing from token 0.",
        "分块 kernel 本来就要计算每个块起点的状态，把它们返回出来几乎没有额外代价。"
        "前缀缓存可以把它们作为块对齐位置上的 checkpoint 保存，之后的请求就能从那里继续，"
        "而不必从第 0 个 token 重新计算。",
        "kda_ref.ops.kda_chunk.chunk_kda",
        SourceRef(_SG_HYBRID_BACKEND, "MambaAttnBackendBase._init_track_ssm_indices", _RESEARCH,
                  "copies h[chunk] (the chunk-start state) into the request's track slot"),
        SourceRef(NOT_LOCATED, "chunk-start states", _RESEARCH,
                  "vLLM's 'align' mode (used for Kimi Linear) copies the running state at block "
                  "boundaries instead of reading chunk-start states"),
    ),
    _c(
        "state.conv", "1.2, 6.5",
        "Short-convolution state", "短卷积状态",
        "Before KDA, q, k and v pass a causal depthwise convolution of width 4. To continue a "
        "sequence the layer must keep the last 3 inputs: a second, small state per KDA layer that "
        "must describe exactly the same token boundary as the recurrent state.",
        "在进入 KDA 之前，q、k、v 先经过宽度为 4 的因果逐通道卷积。要继续一个序列，该层必须保存最近 "
        "3 个输入：这是每个 KDA 层的第二个（较小的）状态，它必须与递推状态对应完全相同的 token 边界。",
        "kda_ref.ops.short_conv.causal_conv1d",
        SourceRef(_SG_KDA_BACKEND, "KDAAttnBackend.forward_extend", _READ_SG_BACKEND,
                  "causal_conv1d_fn on conv_states; forward_decode uses causal_conv1d_update"),
        SourceRef(_VL_KDA, "KimiDeltaAttention._forward", _READ_VL_KDA, "conv_state_q / conv_state_k / conv_state_v"),
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
        SourceRef(_SG_POOL, "MLATokenToKVPool", _RESEARCH),
        SourceRef(_VL_KV_IF, "MLAAttentionSpec", "read @001cabc1"),
    ),
    _c(
        "state.three_kinds", "1.2, 4.1",
        "Three kinds of cached state", "三种缓存状态",
        "A request of a hybrid model owns three kinds of state: per-token MLA KV rows, and per KDA "
        "layer a fixed recurrent state plus a short-conv window. The cache stops being one kind of "
        "page; pools, prefix caches and transfers must handle all three together.",
        "混合模型的一个请求拥有三种状态：按 token 存储的 MLA KV 行，以及每个 KDA 层的固定递推状态和"
        "短卷积窗口。缓存不再只有一种页面；显存池、前缀缓存和传输都必须同时处理这三种。",
        "kda_ref.model.cache.HybridCacheTensors",
        SourceRef(_SG_POOL, "HybridReqToTokenPool", _RESEARCH,
                  "its MambaPool holds conv + temporal state; HybridLinearKVPool holds the MLA KV"),
        SourceRef(_VL_KV_IF, "MambaSpec", "read @001cabc1", "next to MLAAttentionSpec: one KV cache group per spec"),
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
        SourceRef(_VL_MAMBA_UTILS, "MambaStateShapeCalculator.kda_state_shape",
                  "called by vllm/model_executor/layers/kda.py, " + _READ_VL_KDA),
        SourceRef(_VL_KV_IF, "MambaSpec.page_size_bytes", "read @001cabc1"),
    ),
    _c(
        "chain.hybrid", "1.1",
        "The hybrid execution chain", "混合注意力的执行链",
        "Tokens → embedding → per layer: RMSNorm → (KDA or MLA) → residual → RMSNorm → (dense MLP or "
        "MoE) → residual → final norm → LM head. Kimi Linear repeats 3 KDA layers then 1 MLA layer.",
        "token → 嵌入 → 每层：RMSNorm →（KDA 或 MLA）→ 残差 → RMSNorm →（稠密 MLP 或 MoE）→ 残差 → "
        "最终归一化 → LM head。Kimi Linear 以 3 个 KDA 层接 1 个 MLA 层的模式重复。",
        "kda_ref.model.model.HybridModel",
        SourceRef(_SG_KIMI, "KimiDecoderLayer", _READ_SG_KIMI,
                  "KimiDeltaAttention if config.is_kda_layer(i), else KimiMLAAttention"),
        SourceRef("vllm/model_executor/models/kimi_linear.py", "KimiLinearForCausalLM", _RESEARCH),
    ),
    _c(
        "varlen.metadata", "8.3, summary table",
        "Varlen batch metadata", "变长批次元数据",
        "A batch packs the new tokens of many sequences into one row described by cu_seqlens; each "
        "sequence finds its own state slot through state indices, and has_initial_state says "
        "whether it starts from a cached state or from zero.",
        "一个批次把多个序列的新 token 打包成一行，用 cu_seqlens 描述边界；每个序列通过状态索引找到自己的"
        "状态槽，has_initial_state 表示它是从缓存的状态开始还是从零开始。",
        "kda_ref.model.batch.ForwardBatch",
        SourceRef(_SG_HYBRID_BACKEND, "MambaAttnBackendBase._forward_metadata", _RESEARCH,
                  "mamba_cache_indices, query_start_loc"),
        SourceRef("vllm/v1/attention/backends/gdn_attn.py", "GDNAttentionMetadata",
                  "imported by vllm/model_executor/layers/kda.py, " + _READ_VL_KDA,
                  "non_spec_state_indices_tensor, has_initial_state, non_spec_query_start_loc"),
    ),
    _c(
        "sglang.kda_dispatcher", "6.4",
        "One call site, a kernel per phase", "一个调用点，每个阶段一个 kernel",
        "Extend/prefill runs the chunk kernel, decode the fused recurrent kernel, speculative "
        "verify a recurrent kernel that keeps the state after every draft token. The layer does not "
        "choose; a dispatcher does, from the batch's phase.",
        "extend/prefill 运行分块 kernel，decode 运行融合递推 kernel，投机解码的 verify 运行保存每个草稿 "
        "token 之后状态的递推 kernel。选择不由层来做，而是由调度器按批次所处阶段来做。",
        "kda_ref.ops.dispatcher.KDAKernelDispatcher",
        SourceRef(_SG_KDA_BACKEND, "KDAKernelDispatcher", _READ_SG_BACKEND, "decode() and extend()"),
        SourceRef(_VL_KDA, "KimiDeltaAttention._forward", _READ_VL_KDA,
                  "if num_prefills > 0: chunk_kda, else fused_recurrent_kda"),
    ),
    _c(
        "sglang.radix_linear_attention_forward", "6.3",
        "The unified linear-attention entry", "统一的线性注意力入口",
        "Every KDA layer enters attention through one function that finds the layer's conv and "
        "recurrent states in the pool by the batch's state indices and hands the phase to the "
        "backend; the model code never touches cache slots itself.",
        "每个 KDA 层都通过同一个函数进入注意力计算：它按批次的状态索引在池中找到该层的卷积状态和递推状态，"
        "再把阶段交给后端；模型代码本身从不直接操作缓存槽。",
        "kda_ref.model.kda_layer.KDAAttention.forward",
        SourceRef(_SG_RADIX_LA, "RadixLinearAttention.forward", "read @008b79d2"),
        SourceRef(_VL_KDA, "KimiDeltaAttention._forward", _READ_VL_KDA, "reached through the kda_attention custom op"),
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
        SourceRef(_SG_KIMI, "KimiDeltaAttention", _READ_SG_KIMI,
                  "the article names KimiK3DeltaAttention; that class was not located"),
        SourceRef(_VL_KDA, "KimiDeltaAttention", _READ_VL_KDA),
    ),
    _c(
        "engine.continuous_batching", "1.1, summary table",
        "Continuous batching", "连续批处理",
        "Every engine step the scheduler decides again who runs: running requests keep their place "
        "(a decode token or their next prefill chunk), finished ones leave at once, and waiting "
        "requests are admitted while the token budget and memory allow. All of them go through ONE "
        "varlen forward, so a long prompt does not stall the decodes of the others.",
        "引擎每一步都由调度器重新决定谁来运行：正在运行的请求保留位置（一个 decode token 或下一个 "
        "prefill 分块），完成的请求立即离开，等待中的请求在 token 预算和内存允许时被接纳。它们全部进入"
        "同一次变长前向计算，因此一个长提示不会阻塞其他请求的 decode。",
        "kda_ref.engine.scheduler.Scheduler.schedule",
        SourceRef(_SG_SCHED, "Scheduler.get_next_batch_to_run", _READ_SG_SCHED,
                  "called on every iteration of event_loop_normal, then run_batch"),
        SourceRef(_VL_SCHED, "Scheduler.schedule", _READ_VL_SCHED,
                  "RUNNING requests first, then WAITING ones, under one token_budget"),
    ),
    _c(
        "engine.chunked_prefill", "1.1, 1.3",
        "Chunked prefill", "分块预填充",
        "A prompt longer than what is left of the step's token budget is prefilled in chunks over "
        "several steps, mixed with other requests' decodes. For KDA this is exact because the state "
        "passes from chunk to chunk in order — split into segments, but keep the order — each chunk "
        "starting from the state the previous one wrote into the request's slot.",
        "当提示长度超过本步剩余的 token 预算时，它会分成多个分块在多个步骤中预填充，并与其他请求的 "
        "decode 混在一起。对 KDA 来说这是精确的：状态按顺序在分块之间传递——可分段，但必须保序——"
        "每个分块都从上一个分块写入该请求状态槽的状态开始。",
        "kda_ref.engine.scheduler.Scheduler.schedule",
        SourceRef(_SG_POLICY, "PrefillAdder", "read @00550cd1",
                  "rem_chunk_tokens and new_chunked_req; sized by --chunked-prefill-size"),
        SourceRef(_VL_SCHED, "Scheduler.schedule", _READ_VL_SCHED,
                  "num_new_tokens = min(num_new_tokens, token_budget); _mamba_block_aligned_split in align mode"),
    ),
    _c(
        "engine.preemption", "2.2",
        "Preemption by recompute", "抢占与重算",
        "When a running request needs memory that is not there, the scheduler frees a victim's state "
        "slot and KV pages and puts it back in the queue. A KDA state cannot be shrunk or cut back to "
        "an earlier token, so the victim restarts from token 0 (or from a prefix-cache checkpoint); "
        "with greedy sampling it then produces exactly the same tokens.",
        "当正在运行的请求需要的内存不足时，调度器释放某个被抢占请求的状态槽和 KV 页，并把它放回队列。"
        "KDA 状态无法缩小，也无法退回到更早的 token，所以被抢占的请求要从第 0 个 token（或前缀缓存的 "
        "checkpoint）重新开始；在贪心采样下它随后生成的 token 完全相同。",
        "kda_ref.engine.scheduler.Scheduler._preempt",
        SourceRef(_SG_SCHED_BATCH, "ScheduleBatch.retract_decode", "read @000eaffa",
                  "release_req frees the request's KV; it is re-queued and prefilled again"),
        SourceRef(_VL_SCHED, "Scheduler._preempt_request", _READ_VL_SCHED,
                  "called from Scheduler.schedule when kv_cache_manager.allocate_slots fails"),
    ),
    _c(
        "state.kda_recurrent", "1.2, 2.1",
        "KDA recurrent state", "KDA 递推状态",
        "Per KDA layer and sequence, one float32 K×V matrix per head, [HV, K, V]: everything the layer "
        "remembers of the sequence so far. Its size does not depend on the length, it is overwritten "
        "in place every token, and it lives in a state slot that the kernels find through "
        "state_indices.",
        "每个 KDA 层、每个序列，每个头一个 float32 的 K×V 矩阵，即 [HV, K, V]：该层对序列至今的全部记忆。"
        "它的大小与序列长度无关，每个 token 都会被原地覆盖，并存放在一个状态槽中，kernel 通过 "
        "state_indices 找到它。",
        "kda_ref.model.cache.HybridCacheTensors",
        SourceRef(_SG_POOL, "MambaPool.State", _RESEARCH, "temporal [layers, slots + 1, H, K, V], conv beside it"),
        SourceRef(_VL_KDA, "KimiDeltaAttention._forward", _READ_VL_KDA,
                  "recurrent_state, the last tensor of the layer's kv_cache after the three conv states"),
    ),
    _c(
        "memory.state_slot", "1.2, 4.3",
        "State slots", "状态槽",
        "A request's KDA states (recurrent and conv, for all KDA layers) occupy one slot of a pool, "
        "allocated when it is admitted and freed when it finishes; slot 0 is reserved padding. A "
        "batch lists each sequence's slot in state_indices, and the kernels read and write the pool "
        "in place there. An active slot is written every step, so it is never shared: reusing a "
        "state means copying it into a fresh slot.",
        "一个请求的 KDA 状态（所有 KDA 层的递推状态和卷积状态）占用池中的一个槽：请求被接纳时分配，"
        "结束时释放；0 号槽是保留的填充槽。批次在 state_indices 中列出每个序列的槽，kernel 就在那里原地"
        "读写池。活跃的槽每一步都会被写入，因此从不共享：复用一个状态意味着把它复制到一个新槽中。",
        "kda_ref.memory.pool.UnifiedMemoryPool.alloc",
        SourceRef(_SG_POOL, "MambaPool.alloc", _RESEARCH,
                  "HybridReqToTokenPool maps request slot to mamba slot; copy_from and fork_from copy states"),
        SourceRef(_VL_BACKEND_UTILS, "mamba_get_block_table_tensor", "read @00bd1493",
                  "a state is one block of the Mamba group: the block id is the slot"),
    ),
    _c(
        "memory.page_kind", "4.1, summary table",
        "Page kinds", "页面种类",
        "A hybrid model's cache memory holds units of different kinds and sizes: MLA KV pages "
        "(page_size tokens each, more of them as the sequence grows), KDA state slots (one fixed-size "
        "unit per request) and prefix-cache checkpoint slots. The pool accounts for each kind, and "
        "the prefix cache must keep them describing the same token boundaries.",
        "混合模型的缓存内存中有不同种类、不同大小的单元：MLA KV 页（每页 page_size 个 token，随序列增长"
        "而增多）、KDA 状态槽（每个请求一个固定大小的单元）以及前缀缓存的 checkpoint 槽。内存池分别核算每"
        "种单元，前缀缓存必须让它们描述相同的 token 边界。",
        "kda_ref.memory.pool.PageKind",
        SourceRef(_SG_POOL, "HybridLinearKVPool", _RESEARCH,
                  "KV of the full-attention (MLA) layers; MambaPool holds the states"),
        SourceRef(_VL_KV_IF, "KVCacheSpec", "read @001cabc1",
                  "one spec per KV cache group: MLAAttentionSpec, MambaSpec"),
    ),
    _c(
        "memory.unified_pool", "5.5",
        "Unified memory pool", "统一内存池",
        "Instead of fixing at start-up how many bytes go to KV pages and how many to state slots, all "
        "kinds draw from one byte budget, so the split follows the workload: many short requests need "
        "slots, a few long ones need pages. SGLang's opt-in UnifiedKVPool grows two sub-pools from "
        "opposite ends of one buffer; vLLM pads pages so that a state and a KV page have exactly the "
        "same size and one block pool serves both.",
        "不在启动时固定多少字节给 KV 页、多少给状态槽，而是让所有种类共用一个字节预算，使划分随负载变化："
        "大量短请求需要状态槽，少量长请求需要页。SGLang 可选的 UnifiedKVPool 让两个子池从同一缓冲区的两端"
        "相向增长；vLLM 则填充页的大小，使一个状态与一个 KV 页大小完全相同，由同一个块池同时服务。",
        "kda_ref.memory.pool.UnifiedMemoryPool",
        SourceRef(_SG_UNIFIED_POOL, "UnifiedKVPool", "read @01491530",
                  "one uint8 buffer, two sub-pools growing from opposite ends"),
        SourceRef(_VL_MODEL_CONFIG, "HybridAttentionMambaModelConfig.verify_and_update_config", "read @0144dd5b",
                  "raises the attention block size until a page holds a state, pads the mamba page to equal; "
                  "newer trees do this in Platform._align_hybrid_block_size (research notes)"),
    ),
    # ---- the KDA-aware radix tree (kda_ref.cache.radix) -------------------------------------------
    Concept(
        id="sglang.radix.kda_aware",
        section="3.2, 5.1",
        title={"en": "KDA-aware radix tree", "zh": "感知 KDA 的 Radix 树"},
        summary={
            "en": "A radix tree whose nodes hold the KV of a token span and, optionally, one KDA state at "
                  "exactly the node's end boundary. KV exists for every token; a state only where one was saved.",
            "zh": "Radix 树的节点保存一段 token 的 KV，并可选地在该节点的结束边界处保存一个 KDA 状态。"
                  "KV 对每个 token 都存在；状态只存在于被保存过的位置。",
        },
        ours="kda_ref.cache.radix.RadixTree",
        sglang=SourceRef("python/sglang/srt/mem_cache/mamba_radix_cache.py", "MambaRadixCache / TreeNode.mamba_value", "research notes",
                         "per-node optional mamba slot"),
        vllm=SourceRef("vllm/v1/core/single_type_kv_cache_manager.py", "MambaManager.find_longest_cache_hit",
                       "research notes", "block-hash cache instead of a tree; state only in some blocks"),
    ),
    Concept(
        id="sglang.radix.match_backoff",
        section="5.1, 6.10",
        title={"en": "Match, then back off to a state", "zh": "先匹配，再回退到有状态的节点"},
        summary={
            "en": "Matching walks the KV path as in any prefix cache, then backs off to the deepest node that "
                  "carries a state; the KV beyond it cannot be used without recomputing from that state. The "
                  "last chunk-aligned position of the KV hit without a state is reported as the branching "
                  "point, where the coming prefill should save a checkpoint.",
            "zh": "匹配时先像普通前缀缓存一样沿 KV 路径走，然后回退到最深的带状态节点；"
                  "其后的 KV 不能直接使用，必须从该状态重算。KV 命中范围内最后一个没有状态的 chunk 对齐位置"
                  "作为分支点返回，接下来的 prefill 应在那里保存 checkpoint。",
        },
        ours="kda_ref.cache.radix.RadixTree.match_prefix",
        sglang=SourceRef("python/sglang/srt/mem_cache/mamba_radix_cache.py", "MambaRadixCache._match_prefix_helper / _match_post_processor",
                         "research notes", "best_last_node, mamba_branching_seqlen"),
        vllm=SourceRef("vllm/v1/core/single_type_kv_cache_manager.py", "MambaManager.find_longest_cache_hit",
                       "research notes", "right-to-left search for the last cached state block"),
    ),
    Concept(
        id="sglang.radix.tombstone",
        section="5.1, 6.6",
        title={"en": "Tombstones: KV without a state", "zh": "墓碑节点：有 KV 没有状态"},
        summary={
            "en": "A node whose state was evicted, or that was created by splitting an edge, keeps its KV but "
                  "has no state: a tombstone. Splitting never invents a state. A tombstone leaf is useless "
                  "and is deleted, in cascade up the tree.",
            "zh": "状态被驱逐的节点，或由切分边产生的节点，保留 KV 但没有状态，称为墓碑节点。切分绝不会凭空产生"
                  "状态。墓碑叶子没有用处，会沿树向上级联删除。",
        },
        ours="kda_ref.cache.radix.RadixTree.evict_states",
        sglang=SourceRef("python/sglang/srt/mem_cache/mamba_radix_cache.py", "MambaRadixCache._split_node / _tombstone_internal_node / "
                         "_iteratively_delete_tombstone_leaf", "research notes"),
        vllm=None,
    ),
    Concept(
        id="sglang.cow_snapshot_donate",
        section="4.3, 5.4, 6.7",
        title={"en": "Copy-on-write, snapshot and donate", "zh": "写时复制、快照与捐赠"},
        summary={
            "en": "An active state is updated in place by every step, so it is never shared. A cache hit "
                  "copies the checkpoint into a fresh active slot (copy-on-write); between prefill chunks the "
                  "active state is copied into a new checkpoint (snapshot); a finished request hands its "
                  "active slot to the cache without copying (donate).",
            "zh": "活动状态每一步都会被原地更新，因此绝不共享。缓存命中时把 checkpoint 复制到新的活动槽位"
                  "（写时复制）；prefill 的 chunk 之间把活动状态复制成新的 checkpoint（快照）；"
                  "请求结束时把活动槽位直接交给缓存，不做复制（捐赠）。",
        },
        ours="kda_ref.cache.radix.RadixPrefixCache",
        sglang=SourceRef("python/sglang/srt/mem_cache/mamba_radix_cache.py", "MambaRadixCache.cache_unfinished_req / cache_finished_req / _match_post_processor",
                         "research notes", "fork_from + copy_from (COW), donate of the working slot"),
        vllm=None,
    ),
    Concept(
        id="sglang.boundary_consistency",
        section="4.2, 6.11",
        title={"en": "Boundary consistency", "zh": "边界一致性"},
        summary={
            "en": "A restored prefix is three things that must describe exactly the same token boundary: the "
                  "KDA recurrent state, the short-conv windows (the last W-1 inputs before the boundary) and the "
                  "MLA KV of the tokens before it. A state saved after a different number of tokens, or conv "
                  "windows taken elsewhere, give a different answer without any error, so the cache records "
                  "each checkpoint's boundary and checks it before every restore.",
            "zh": "恢复一个前缀时，有三样东西必须描述完全相同的 token 边界：KDA 递推状态、短卷积窗口（边界之前的"
                  "最后 W-1 个输入）以及边界之前各 token 的 MLA KV。在另一个 token 数之后保存的状态，或取自别处的"
                  "卷积窗口，都会在没有任何报错的情况下给出不同的答案；因此缓存为每个 checkpoint 记录其边界，"
                  "并在每次恢复前检查。",
        },
        ours="kda_ref.cache.radix.RadixPrefixCache.check_boundary",
        sglang=SourceRef(_SG_HYBRID_BACKEND, "MambaAttnBackendBase._init_track_ssm_indices", _RESEARCH,
                         "the tracked state is h at the cache boundary, not the final state of the extend; "
                         "_init_track_conv_indices gathers the conv window ending at the same position"),
        vllm=SourceRef(NOT_LOCATED, "mamba_state_copy_boundary", "research notes (hybrid_cache.md), from an "
                       "unconfirmed copy of ssu_dispatch.py", "align mode copies the state at the block-aligned "
                       "boundary it describes"),
    ),
    Concept(
        id="sglang.checkpoint_policy",
        section="5.2, 9.2",
        title={"en": "Where to keep checkpoints", "zh": "checkpoint 放在哪里"},
        summary={
            "en": "Every checkpoint is a whole state (hundreds of KiB per request in the tiny model, MiBs in a real "
                  "one), so a cache cannot keep one per chunk for long: dense checkpoints crowd out KV and each "
                  "other and get evicted; sparse ones make every hit recompute more. Policies: every chunk "
                  "boundary a prefill passes, every n tokens (SGLang's mamba_track_interval, vLLM's retention "
                  "interval), or only where requests actually branch plus the ends of finished requests "
                  "(Marconi-style).",
            "zh": "每个 checkpoint 都是一个完整的状态（tiny 模型中每个请求数百 KiB，真实模型中是 MiB 级），因此缓存"
                  "无法长期为每个 chunk 保留一个：稠密的 checkpoint 会挤占 KV、相互挤占并被驱逐；稀疏的则让每次命中"
                  "都要多重算。策略有：prefill 经过的每个 chunk 边界、每 n 个 token 一个（SGLang 的 "
                  "mamba_track_interval、vLLM 的 retention interval），或只在请求真正分叉的位置加上已完成请求的"
                  "末尾（Marconi 风格）。",
        },
        ours="kda_ref.cache.radix.RadixPrefixCache.wants",
        sglang=SourceRef(_SG_SCHED_BATCH, "ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend",
                         "research notes (hybrid_cache.md), from an unconfirmed copy",
                         "tracks the last chunk-aligned boundary of each extend, or the branching point"),
        vllm=SourceRef(NOT_LOCATED, "reachable_block_mask", "research notes (hybrid_cache.md): vLLM PR #45845, #52216",
                       "prefix_cache_retention_interval: dense, every n blocks, or only reachable boundaries"),
    ),
    Concept(
        id="sglang.compressed_checkpoint",
        section="5.3",
        title={"en": "Compressed checkpoints", "zh": "压缩 checkpoint"},
        summary={
            "en": "Cached states sit idle until a hit, so they can be stored smaller than the active fp32 "
                  "states: bf16, or int8 with one scale per head and key channel. A hit dequantizes into a "
                  "fresh active slot. More states fit in the same memory, at the price of a small drift.",
            "zh": "缓存的状态在命中之前一直闲置，因此可以比活动的 fp32 状态存得更小：bf16，或每个 head、每个"
                  " key 通道一个 scale 的 int8。命中时反量化到新的活动槽位。同样的内存能放下更多状态，"
                  "代价是少量数值漂移。",
        },
        ours="kda_ref.memory.checkpoint_store.CompressedCheckpoints",
        sglang=SourceRef("python/sglang/srt/mem_cache/mamba_checkpoint_pool.py",
                         "store_from_active / load_to_active", "research notes",
                         "int8 temporal state, scale = amax_over_dv(|S|) / 127"),
        vllm=None,
    ),
    _c(
        "vllm.block_hash", "7",
        "Chained block hashes", "链式块哈希",
        "vLLM names a prefix by hashing blocks in a chain: each hash covers the parent's hash and this block's "
        "tokens, so one hash names the whole prefix up to that block. Hashes are taken per small hash unit (the "
        "prefix-match unit), finer than the physical state blocks; a block is named by the hash of its last unit.",
        "vLLM 用链式哈希命名前缀：每个哈希包含父块的哈希和本块的 token，因此一个哈希就代表到该块为止的整个前缀。"
        "哈希按较小的哈希单元（前缀匹配单元）计算，比物理状态块更细；一个块由其最后一个单元的哈希命名。",
        "kda_ref.cache.block.chain_hashes",
        SourceRef(NOT_LOCATED, "RadixCache.match_prefix", _RESEARCH,
                  "SGLang matches token keys in a radix tree instead of hashing blocks"),
        SourceRef("vllm/v1/core/kv_cache_utils.py", "hash_block_tokens", _RESEARCH,
                  "parent hash + block tokens (+ extra keys); hash_block_size can be finer than block_size"),
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
        SourceRef(_SG_MAMBA_RADIX, "MambaRadixCache.match_prefix", _RESEARCH,
                  "walk the KV path, back off to the deepest node holding a mamba value"),
        SourceRef(_VL_COORD, "HybridKVCacheCoordinator.find_longest_cache_hit", _RESEARCH,
                  "groups sorted full attention first; loop until the hit length stops shrinking"),
    ),
    _c(
        "vllm.state_block", "7, 8",
        "State blocks: logical prefix, physical state", "状态块：逻辑前缀与物理状态",
        "In the state group a block holds the recurrent and conv state at the block's end. A request's block table "
        "lists its whole logical prefix, but only the last hit block is a real state; the blocks before it are "
        "null. A hit copies that state into the request's own running slot (copy-on-write).",
        "在状态组里，一个块保存该块末尾处的递推状态和卷积状态。请求的块表列出其完整的逻辑前缀，但只有最后一个命中的块"
        "是真实状态，之前的块都是空块。命中时把该状态复制到请求自己的运行槽中（写时复制）。",
        "kda_ref.cache.block.BlockPrefixCache.admit",
        SourceRef(_SG_MAMBA_RADIX, "MambaRadixCache.match_prefix", _RESEARCH,
                  "one mamba value per radix node instead of one state per block"),
        SourceRef(_VL_SINGLE, "MambaManager.find_longest_cache_hit", _RESEARCH,
                  "computed = [null_block] * i + [cached]: only one real block"),
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
        SourceRef(_SG_MAMBA_RADIX, "MambaRadixCache.match_prefix", _RESEARCH,
                  "mamba_branching_seqlen: the branching point is checkpointed during the coming prefill"),
        SourceRef(_VL_SINGLE, "MambaManager._cache_partial_tail_block", _RESEARCH,
                  "partial tail block at the prompt's last hash boundary; a cow_block for consumers"),
    ),
    _c(
        "vllm.mamba_cache_mode", "7, 9.2",
        "mamba_cache_mode: all vs align", "mamba_cache_mode：all 与 align",
        "'all' caches the state at every block boundary (the chunk kernel's chunk-start states provide the ones "
        "inside a step). 'align' caches only where a scheduler step ends on a block boundary; the scheduler "
        "aligns prefill chunks to blocks and forces the chunk that ends on the last cacheable block.",
        "'all' 在每个块边界缓存状态（步内的边界由 chunk 内核的 chunk 起始状态提供）。'align' 只在调度步恰好结束于块"
        "边界时缓存；调度器把 prefill 分块对齐到块，并强制让一个分块结束在最后一个可缓存的块上。",
        "kda_ref.cache.block.BlockPrefixCache.align_chunk",
        SourceRef(_SG_SCHED_BATCH, "mamba_track_interval", _RESEARCH,
                  "SGLang tracks a state every --mamba-track-interval tokens (extra_buffer ping-pong slots)"),
        SourceRef(_VL_ALIGN, "MambaPrefillChunkAlignmentPolicy.align_scheduled_tokens", _RESEARCH,
                  "align chunks to block_size; force the last cacheable chunk"),
    ),
    _c(
        "vllm.retention", "9.2",
        "Retention: dense, interval, reachable", "保留策略：稠密、间隔、可达",
        "Which of the produced states to keep. Dense keeps all; an interval keeps one per N tokens; interval 0 "
        "keeps only reachable boundaries: shared-prefix junctions (Marconi's branch-off points) and the replay "
        "point, the last boundary a request passed (held as one pending state and committed at finish).",
        "决定保留哪些已产生的状态。稠密保留全部；间隔每 N 个 token 保留一个；间隔 0 只保留可达边界：共享前缀的分叉点"
        "（Marconi 的分支点）和重放点，即请求经过的最后一个边界（作为一个待定状态持有，结束时提交）。",
        "kda_ref.cache.block.retention_mask",
        SourceRef(_SG_UNIFIED_RADIX, "_evict_excess_path_states", _RESEARCH,
                  "mamba_max_states_per_path: a per-path cap instead of an interval"),
        SourceRef(NOT_LOCATED, "reachable_block_mask", "research notes (hybrid_cache.md 3.5), vLLM PR #45845",
                  "None = dense, 0 = reachable boundaries only, N = one state per N tokens"),
    ),
    _c(
        "vllm.block_eviction", "7, 9.2",
        "Block eviction (LRU)", "块淘汰（LRU）",
        "Cached blocks with no running user are evicted least recently used first. KV is evicted only at the tail "
        "of a cached prefix (a middle block would orphan the hashes after it); a state can be dropped anywhere "
        "while its KV stays.",
        "没有运行中请求使用的缓存块按最近最少使用的顺序淘汰。KV 只从缓存前缀的末尾淘汰（淘汰中间的块会让其后的哈希失去"
        "意义）；状态则可以在任何位置丢弃，而其 KV 保留。",
        "kda_ref.cache.block.BlockHashTable.evict_until",
        SourceRef(_SG_MAMBA_RADIX, "MambaRadixCache.evict_mamba", _RESEARCH, "mamba LRU: tombstone internal nodes"),
        SourceRef("vllm/v1/core/block_pool.py", "BlockPool.get_new_blocks", _RESEARCH,
                  "free blocks leave the free queue in LRU order; their hash is dropped"),
    ),
    _c(
        "marconi.eviction", "9.2",
        "Marconi's eviction utility", "Marconi 的淘汰效用",
        "Marconi evicts among entries with at most one child the one with the lowest utility alpha * norm(FLOPs "
        "saved per byte) + norm(recency). A state far from its parent state saves much prefill for its bytes; a "
        "branch point is never a candidate. Only the node a hit used is refreshed.",
        "Marconi 在至多有一个子节点的条目中淘汰效用最低者：效用 = alpha * 归一化(每字节节省的 FLOPs) + 归一化(新近度)。"
        "离父状态很远的状态以其字节换来大量 prefill 节省；分叉点永远不是候选。命中时只刷新被使用的那个节点。",
        "kda_ref.cache.block.BlockHashTable.marconi_order",
        SourceRef(NOT_LOCATED, "--enable-marconi", "SGLang PR #17898 (closed), research notes",
                  "not merged; SGLang evicts by LRU"),
        SourceRef(NOT_LOCATED, "Marconi-style shared-prefix caching", "vLLM PR #37898, research notes",
                  "retention of shared-prefix states; eviction stays LRU"),
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
        SourceRef(NOT_LOCATED, "--enable-marconi", "SGLang PR #17898 (closed)", "not merged"),
        SourceRef(NOT_LOCATED, "ConfigTuner.tune_config", _MARCONI, "Marconi's own simulator, not vLLM"),
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
        SourceRef(NOT_LOCATED, "--mamba-track-interval", _RESEARCH, "server flag, default 256 tokens"),
        SourceRef(_VL_CACHE_CFG, "CacheConfig.mamba_cache_mode", _RESEARCH,
                  "'all' caches every block, 'align' only at step ends; retention interval is separate"),
    ),
]

CONCEPTS: dict[str, Concept] = {c.id: c for c in _CONCEPT_LIST}


def get(concept_id: str) -> Concept:
    """The concept with this id; ``KeyError`` naming the id if there is none."""
    try:
        return CONCEPTS[concept_id]
    except KeyError:
        raise KeyError(f"concepts: unknown concept id {concept_id!r}") from None


def resolve(dotted: str):
    """Import ``package.module[.attr...]`` and return the object it names.

    Walks the path left to right: an attribute if the object has it, else a submodule import.
    Raises ``ModuleNotFoundError`` / ``AttributeError`` when a part does not exist.
    """
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    name = parts[0]
    for part in parts[1:]:
        name = f"{name}.{part}"
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif isinstance(obj, types.ModuleType) and hasattr(obj, "__path__"):  # a package: try a submodule
            obj = importlib.import_module(name)
        else:
            raise AttributeError(f"concepts: {dotted!r}: {type(obj).__name__} has no attribute {part!r}")
    return obj


def _ref_md(ref: SourceRef | None, lang: str) -> str:
    if ref is None:
        return t("common.concepts.none", lang)
    if ref.file == NOT_LOCATED:
        text = f"{ref.symbol} — *{NOT_LOCATED}*"
    else:
        text = f"`{ref.file}` · `{ref.symbol}`"
    if ref.detail:
        text += f" — {ref.detail}"
    return f"{text} ({ref.note})" if ref.note else text


def concept_markdown(concept_id: str, lang: str) -> str:
    """A concept as markdown for the "concepts on this page" panel (explanation + pointers)."""
    c = get(concept_id)
    if lang not in LANGS:
        raise KeyError(f"lang: unknown language {lang!r}")
    lines = [
        c.summary[lang],
        "",
        f"- **{t('common.concepts.section', lang)}:** {c.section} · `{c.id}`",
        f"- **{t('common.concepts.ours', lang)}:** `{c.ours}`",
        f"- **{t('common.concepts.sglang', lang)}:** {_ref_md(c.sglang, lang)}",
        f"- **{t('common.concepts.vllm', lang)}:** {_ref_md(c.vllm, lang)}",
    ]
    if c.fla is not None:
        lines.append(f"- **{t('common.concepts.fla', lang)}:** {_ref_md(c.fla, lang)}")
    return "\n".join(lines)
