"""UI strings of the page ``app_pages/hybrid_chain.py`` (namespace ``hybrid_chain.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "hybrid_chain.nav": {
        "en": "Hybrid execution chain",
        "zh": "混合执行链",
    },
    "hybrid_chain.caption": {
        "en": "Step through the engine: who is in each batch, the packed cu_seqlens, and which kernel every layer runs.",
        "zh": "逐步查看引擎：每个批次里有哪些请求、打包后的 cu_seqlens，以及每一层运行了哪个 kernel。",
    },
    "hybrid_chain.title": {
        "en": "Hybrid execution chain",
        "zh": "混合执行链",
    },
    "hybrid_chain.k3_note": {
        "en": ("Kimi K3's tiny layout: the same kernels run in the same order (KDA extend / decode, the paged MLA), so "
               "the batch and the kernel grid look alike. What differs happens between and inside them, per token: "
               "each attention and MLP reads a softmax mix over depth of the finished blocks' sums and the current "
               "one (attention residuals, blocks of 2 layers here, 12 in K3), KDA's gate is bounded, MLA has q-LoRA "
               "and an output gate, and the routed experts run in a latent space of half the width."),
        "zh": ("Kimi K3 的 tiny 结构：运行的是同样的内核、同样的顺序（KDA 的 extend / decode、分页 MLA），所以批次和内核"
               "网格看起来一样。不同之处发生在它们之间和内部、逐 token 进行：每个注意力和 MLP 读取的是对已完成块的和与当前"
               "块在深度方向上的 softmax 混合（注意力残差，这里每块 2 层，K3 中 12 层），KDA 的门有下界，MLA 有 q-LoRA "
               "和输出门，路由专家在一半宽度的潜空间中运行。"),
    },
    "hybrid_chain.intro": {
        "en": (
            "Every engine step, the scheduler picks who runs: a **decode** token for requests that are "
            "generating, and the next **prefill chunk** for requests whose prompt is not yet in the "
            "cache, all under one **token budget**. The new tokens of all of them are packed into ONE "
            "row, described by `cu_seqlens`, and go through the layers once.\n\n"
            "Inside every KDA layer, a step that is all decodes runs the recurrent kernel "
            "`fused_recurrent_kda`; a step with any prefill chunk runs the chunkwise kernel `chunk_kda` "
            "over **every** token of the batch, each decode being a one-token sequence that starts from "
            "its own state slot — what SGLang (a `MIXED` batch goes to `forward_extend`) and vLLM (the "
            "chunk path whenever `num_prefills > 0`) do. The *split* option sends the decodes to the "
            "recurrent kernel instead: two launches, each on the shape it is made for. The MLA layer "
            "appends every token's latent KV row to its pages and attends over them.\n\n"
            "Below, {n} requests with prompts of {lens} tokens run with a budget of {budget} tokens per "
            "step, so the long prompts are prefilled in chunks mixed with the decodes of the others. "
            "Step through the run."
        ),
        "zh": (
            "引擎每一步都由调度器决定谁来运行：正在生成的请求运行一个 **decode** token，提示词还没有全部进入"
            "缓存的请求运行下一个 **prefill 分块**，它们共用一个 **token 预算**。所有这些新 token 被打包成"
            "**一行**，用 `cu_seqlens` 描述边界，然后一起穿过各层。\n\n"
            "在每个 KDA 层内部，全部是 decode 的一步运行递推 kernel `fused_recurrent_kda`；只要有 prefill "
            "分块，这一步就用分块 kernel `chunk_kda` 处理批次中的**每一个** token，每个 decode 是一个只有一个 "
            "token、从自己的状态槽位出发的序列——SGLang（`MIXED` 批次走 `forward_extend`）和 vLLM（只要 "
            "`num_prefills > 0` 就走分块路径）都是这样做的。*拆分*选项则把 decode 交给递推 kernel：两次启动，"
            "每个 kernel 处理它擅长的形状。MLA 层把每个 token 的潜在 KV 行追加到它的页中，并在这些页上做注意力。"
            "\n\n"
            "下面，{n} 个请求（提示词长度分别为 {lens} 个 token）在每步 {budget} 个 token 的预算下运行，"
            "因此长提示词会被分块预填充，并与其他请求的 decode 混在一起。请逐步查看这次运行。"
        ),
    },
    "hybrid_chain.mixed_label": {
        "en": "a step with decodes and prefill chunks runs",
        "zh": "同时含 decode 和 prefill 分块的一步如何运行",
    },
    "hybrid_chain.mixed.chunk": {
        "en": "one chunk_kda call (SGLang, vLLM)",
        "zh": "一次 chunk_kda 调用（SGLang、vLLM）",
    },
    "hybrid_chain.mixed.split": {
        "en": "split: decodes to fused_recurrent_kda",
        "zh": "拆分：decode 交给 fused_recurrent_kda",
    },
    "hybrid_chain.budget_label": {
        "en": "token budget per step (max_num_batched_tokens)",
        "zh": "每步 token 预算（max_num_batched_tokens）",
    },
    "hybrid_chain.nreq_label": {
        "en": "number of requests",
        "zh": "请求数",
    },
    "hybrid_chain.current": {
        "en": ("**Step {step}**: {seqs}, {tokens} of {budget} budget tokens. "
               "Prefill chunks: {chunks}. Decodes: {decodes}. Admitted this step: {admitted}. "
               "Still waiting: {waiting}."),
        "zh": ("**第 {step} 步**：{seqs}，用了 {budget} 个预算 token 中的 "
               "{tokens} 个。prefill 分块：{chunks}。decode：{decodes}。本步接纳：{admitted}。"
               "仍在等待：{waiting}。"),
    },
    "hybrid_chain.n_seqs.one": {"en": "{n} sequence", "zh": "{n} 个序列"},
    "hybrid_chain.n_seqs.many": {"en": "{n} sequences", "zh": "{n} 个序列"},
    "hybrid_chain.verifies": {
        "en": "Speculative verifies: {items}.",
        "zh": "投机验证：{items}。",
    },
    "hybrid_chain.verify_line": {
        "en": "verify r{req}: 1 + {drafts} tokens, {kept} kept",
        "zh": "验证 r{req}：1 + {drafts} 个 token，保留 {kept} 个",
    },
    "hybrid_chain.fig.verify_segment": {
        "en": "r{req} · {phase} · 1 + {drafts} · {kept} kept",
        "zh": "r{req} · {phase} · 1 + {drafts} · 保留 {kept}",
    },
    "hybrid_chain.fig.budget_off": {
        "en": "budget {n} (off this scale) →",
        "zh": "预算 {n}（超出此刻度）→",
    },
    "hybrid_chain.finished": {
        "en": "Finished after this step: {reqs}.",
        "zh": "本步之后完成：{reqs}。",
    },
    "hybrid_chain.preempted": {
        "en": "Preempted in this step: {reqs}.",
        "zh": "本步被抢占：{reqs}。",
    },
    "hybrid_chain.phase.extend": {
        "en": "extend",
        "zh": "预填充",
    },
    "hybrid_chain.phase.decode": {
        "en": "decode",
        "zh": "解码",
    },
    "hybrid_chain.phase.verify": {
        "en": "verify",
        "zh": "验证",
    },
    "hybrid_chain.fig.batch.title": {
        "en": "Step {step}: the packed batch, cu_seqlens = {cu}",
        "zh": "第 {step} 步：打包后的批次，cu_seqlens = {cu}",
    },
    "hybrid_chain.fig.batch.x": {
        "en": "position in the packed row of new tokens",
        "zh": "新 token 在打包行中的位置",
    },
    "hybrid_chain.fig.budget": {
        "en": "budget {n}",
        "zh": "预算 {n}",
    },
    "hybrid_chain.fig.grid.title": {
        "en": "Step {step}: the kernel each layer ran, per phase group",
        "zh": "第 {step} 步：每一层对每个阶段组运行的 kernel",
    },
    "hybrid_chain.fig.layer": {
        "en": "layer {layer} · {kind}",
        "zh": "第 {layer} 层 · {kind}",
    },
    "hybrid_chain.fig.cell": {
        "en": "{seqs} seq · {tokens} tok",
        "zh": "{seqs} 个序列 · {tokens} 个 token",
    },
    "hybrid_chain.fig.idle": {
        "en": "— not run —",
        "zh": "— 未运行 —",
    },
    "hybrid_chain.fig.timeline.title": {
        "en": "Tokens per step, by request (hatched: decode, crossed: verify); step {step} highlighted",
        "zh": "每步的 token 数，按请求分色（斜线：decode，交叉线：verify）；高亮第 {step} 步",
    },
    "hybrid_chain.fig.step": {
        "en": "engine step",
        "zh": "引擎步骤",
    },
    "hybrid_chain.fig.tokens": {
        "en": "tokens in the batch",
        "zh": "批次中的 token 数",
    },
    "hybrid_chain.fig.other_requests": {
        "en": "{n} other requests",
        "zh": "其余 {n} 个请求",
    },
    "hybrid_chain.fig.preempted": {
        "en": "r{req} preempted",
        "zh": "r{req} 被抢占",
    },
    "hybrid_chain.table.title": {
        "en": "The batch metadata of this step (one row per sequence, in batch order)",
        "zh": "本步的批次元数据（每个序列一行，按批次顺序）",
    },
    "hybrid_chain.col.req": {"en": "request", "zh": "请求"},
    "hybrid_chain.col.phase": {"en": "phase", "zh": "阶段"},
    "hybrid_chain.col.new_tokens": {"en": "new tokens", "zh": "新 token 数"},
    "hybrid_chain.col.context_len": {"en": "context_lens (cached before)", "zh": "context_lens（之前已缓存）"},
    "hybrid_chain.col.range": {"en": "cu_seqlens range", "zh": "cu_seqlens 区间"},
    "hybrid_chain.col.state_slot": {"en": "state_indices (slot)", "zh": "state_indices（状态槽位）"},
    "hybrid_chain.col.kv_pages": {"en": "block_table (KV pages; \u201c(n) \u2026\u201d: n pages, the last ones shown)",
                                  "zh": "块表（KV 页；\u201c(n) \u2026\u201d：共 n 页，只列最后几页）"},
    "hybrid_chain.mla_note": {
        "en": ("KDA cells come from the trace's `kernel_dispatch` events. The MLA row is derived from the "
               "batch phases: our MLA layer runs expand-then-attend (`mla_attention_naive`) for extend and "
               "weight-absorbed attention over the latent rows (`mla_attention_absorbed`) for decode."),
        "zh": ("KDA 单元格来自 trace 中的 `kernel_dispatch` 事件。MLA 一行由批次中的阶段推出：本项目的 MLA 层"
               "对 extend 先展开再做注意力（`mla_attention_naive`），对 decode 在潜在行上做权重吸收注意力"
               "（`mla_attention_absorbed`）。"),
    },
    "hybrid_chain.watch": {
        "en": (
            "- **Chunked prefill.** The first request's prompt is longer than the budget: it takes "
            "several steps, its `context_lens` growing by one chunk each time. Every chunk starts from "
            "the state the previous chunk left in the request's slot — the same slot number every step.\n"
            "- **Mixed batches.** Once a request has its first token it decodes one token per step, in "
            "the same forward as the other requests' prefill chunks. By default (SGLang's and vLLM's "
            "way) the grid then shows one `chunk_kda` call per KDA layer covering every sequence, decodes "
            "included, and an idle decode column: one launch, but a chunk's setup for a single token. "
            "Switch to *split* and the same step shows `chunk_kda` for the chunks and "
            "`fused_recurrent_kda` for the decodes: a second launch, each kernel on its own shape. The "
            "tokens are the same either way (`tests/test_mixed_batch.py`).\n"
            "- **One kernel per phase, not per layer.** Every KDA layer makes the same choice; the "
            "dispatcher picks it from the phase of the group, the layer code never does. The MLA layer "
            "keeps decoding its decode sequences with weight-absorbed attention in both modes.\n"
            "- **Raise the budget** to 64: most prompts fit in one step and most of the chunking disappears. "
            "Lower it to 8 and watch decodes squeeze out prefill tokens."
        ),
        "zh": (
            "- **分块预填充。** 第一个请求的提示词比预算长：它要占用好几步，每一步它的 `context_lens` 增长一个"
            "分块。每个分块都从上一个分块留在该请求状态槽位中的状态开始——每一步都是同一个槽号。\n"
            "- **混合批次。** 请求一旦得到第一个 token，就每步 decode 一个 token，并与其他请求的 prefill "
            "分块在同一次前向中运行。默认情况下（SGLang 和 vLLM 的做法），网格在每个 KDA 层显示一次覆盖所有序列"
            "（包括 decode）的 `chunk_kda` 调用，decode 列空闲：只启动一次，但为单个 token 付出了一个分块的准备"
            "开销。切换到*拆分*后，同一步显示分块用的 `chunk_kda` 和 decode 用的 `fused_recurrent_kda`：多一次"
            "启动，但每个 kernel 处理自己擅长的形状。两种方式生成的 token 相同（`tests/test_mixed_batch.py`）。\n"
            "- **按阶段选 kernel，而不是按层。** 每个 KDA 层做出相同的选择；由 kernel 分派器根据分组的阶段来选，"
            "层的代码从不自己选。两种模式下，MLA 层都对 decode 序列使用权重吸收注意力。\n"
            "- **把预算调到 64**：大多数提示词在一步内放得下，大部分分块消失了。调到 8，可以看到 decode 挤占了 "
            "prefill 的 token。"
        ),
    },
}
