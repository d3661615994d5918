"""UI strings in English and Chinese, as data, and :func:`t` to look one up.

Every key has both languages (a test checks it, and that both use the same ``{placeholders}``).
A missing key or language raises ``KeyError``: a typo fails loudly in tests instead of showing
an empty label. Concept titles and explanations live in :mod:`model_viz.concepts`, not here.
"""

from __future__ import annotations

LANGS = ("en", "zh")
LANG_LABELS = {"en": "English", "zh": "中文"}
DEFAULT_LANG = "en"

STRINGS: dict[str, dict[str, str]] = {
    # ---- app frame ---------------------------------------------------------------------------
    "app.name": {
        "en": "KDA serving visualizer",
        "zh": "KDA 推理可视化",
    },
    "app.lang_label": {
        "en": "Language",
        "zh": "语言",
    },
    "nav.home": {
        "en": "Home",
        "zh": "首页",
    },
    "nav.state_evolution": {
        "en": "KDA state evolution",
        "zh": "KDA 状态演化",
    },
    "home.title": {
        "en": "How a hybrid KDA + MLA model is served",
        "zh": "混合 KDA + MLA 模型是如何被推理服务的",
    },
    "home.body": {
        "en": (
            "This app is the visual half of a **runnable reference implementation** of serving a "
            "hybrid linear-attention model: **KDA** (Kimi Delta Attention) layers mixed with "
            "**MLA** (multi-head latent attention) layers, as in Kimi Linear.\n\n"
            "A KDA layer keeps a **fixed-size recurrent state** per sequence instead of a KV cache "
            "that grows with every token. That one design choice breaks assumptions a standard "
            "serving stack relies on: prefix caching, memory pools, speculative decoding, "
            "prefill/decode disaggregation. Each page runs the engine in `kda_ref/` on your input, "
            "shows what happens step by step, and points to the matching code in this project, "
            "in SGLang and in vLLM.\n\n"
            "The model here is tiny (about 3M parameters, 3 KDA layers and 1 MLA layer) with "
            "random weights, so it runs on a CPU in a second: watch the mechanics, not the meaning "
            "of the output."
        ),
        "zh": (
            "本应用是一个**可运行的参考实现**的可视化部分，演示混合线性注意力模型的推理服务："
            "**KDA**（Kimi Delta Attention）层与 **MLA**（多头潜在注意力）层混合，如 Kimi Linear。\n\n"
            "KDA 层为每个序列保存一个**固定大小的递推状态**，而不是随 token 增长的 KV cache。"
            "这一设计打破了标准推理栈依赖的若干假设：前缀缓存、显存池、投机解码、PD 分离。"
            "每个页面都会用 `kda_ref/` 中的引擎运行你的输入，逐步展示发生了什么，"
            "并指向本项目、SGLang 和 vLLM 中对应的代码。\n\n"
            "这里的模型很小（约 300 万参数，3 个 KDA 层加 1 个 MLA 层），权重是随机的，"
            "在 CPU 上一秒内即可跑完：请关注机制，而不是输出的含义。"
        ),
    },
    "home.pages": {
        "en": "Pages",
        "zh": "页面",
    },
    "home.page.state_evolution": {
        "en": "watch each KDA head's state matrix change token by token, with its gate and write strength.",
        "zh": "逐 token 观察每个 KDA 头的状态矩阵如何变化，以及它的遗忘门和写入强度。",
    },
    # ---- state evolution page ----------------------------------------------------------------
    "state.title": {
        "en": "KDA state evolution",
        "zh": "KDA 状态演化",
    },
    "state.intro": {
        "en": (
            "A KDA layer does not keep a growing cache of past tokens. Each head keeps **one "
            "fixed-size matrix S** (K × V = {K} × {V} here) and updates it after every token:\n\n"
            "$$S_t = (I - \\beta_t k_t k_t^\\top)\\,\\mathrm{{Diag}}(\\alpha_t)\\,S_{{t-1}} "
            "+ \\beta_t k_t v_t^\\top$$\n\n"
            "First every key channel of S forgets by its own factor "
            "$\\alpha_t = \\exp(g_t) \\in (0, 1]$ (the **gate**). Then the **delta rule** "
            "reads what S currently predicts for the key $k_t$, compares it with the new "
            "value $v_t$, and writes the difference with strength $\\beta_t \\in (0, 1)$.\n\n"
            "Type a prompt, pick a layer and step through the tokens. The heatmaps show S after "
            "the current token; the colour scale is fixed for the whole prompt, so what changes "
            "on screen is the state itself."
        ),
        "zh": (
            "KDA 层不会保存一个不断增长的历史 token 缓存。每个头只保存**一个固定大小的矩阵 S**"
            "（这里 K × V = {K} × {V}），并在每个 token 之后更新它：\n\n"
            "$$S_t = (I - \\beta_t k_t k_t^\\top)\\,\\mathrm{{Diag}}(\\alpha_t)\\,S_{{t-1}} "
            "+ \\beta_t k_t v_t^\\top$$\n\n"
            "首先，S 的每个 key 通道按各自的系数 $\\alpha_t = \\exp(g_t) \\in (0, 1]$ "
            "衰减（即**遗忘门**）。然后 **delta 规则**读出 S 对 key $k_t$ 的当前预测，"
            "与新的 value $v_t$ 比较，并以强度 $\\beta_t \\in (0, 1)$ 写入二者之差。\n\n"
            "输入一段提示词，选择一层，然后逐个 token 前进。热力图显示当前 token 之后的 S；"
            "颜色范围在整段提示词内固定，所以屏幕上的变化就是状态本身的变化。"
        ),
    },
    "state.trained_model": {
        "en": "The model was trained in this repo (docs/training.md) on associative recall and on the repo's "
              "own docs: after each key-value pair the state stores it, and at a query it gives it back.",
        "zh": "模型在本仓库中训练（见 docs/training.md），任务是联想回忆和仓库自己的文档："
              "每个键值对之后状态把它存下，遇到查询时再把它取出来。",
    },
    "state.prompt_label": {
        "en": "Prompt (UTF-8 bytes are the tokens, at most {max_bytes})",
        "zh": "提示词（每个 UTF-8 字节是一个 token，最多 {max_bytes} 个）",
    },
    "state.err.empty": {
        "en": "The prompt is empty: type at least one character.",
        "zh": "提示词为空：请至少输入一个字符。",
    },
    "state.err.too_long": {
        "en": "The prompt is {n} bytes long; the limit is {max_bytes} bytes. Shorten it.",
        "zh": "提示词长 {n} 字节，上限为 {max_bytes} 字节，请缩短。",
    },
    "state.layer_label": {
        "en": "KDA layer",
        "zh": "KDA 层",
    },
    "state.prev": {
        "en": "◀ previous",
        "zh": "◀ 上一个",
    },
    "state.next": {
        "en": "next ▶",
        "zh": "下一个 ▶",
    },
    "state.step_label": {
        "en": "token position t",
        "zh": "token 位置 t",
    },
    "state.delta_toggle": {
        "en": "show the change ΔS = S_t − S_(t−1) instead of S_t",
        "zh": "显示变化量 ΔS = S_t − S_(t−1)，而不是 S_t",
    },
    "state.current": {
        "en": "Token position t = {t} (of {T} tokens, counted from 0): {label} (byte {byte})",
        "zh": "token 位置 t = {t}（共 {T} 个 token，从 0 开始计数）：{label}（字节 {byte}）",
    },
    "state.bytes": {
        "en": (
            "Size check: one head's state is {K} × {V} fp32 = {head_kib:g} KiB, one layer's "
            "{layer_kib:g} KiB (plus {conv_kib:g} KiB of short-conv window). It is the same after "
            "token 1 as after token {T}: the state does not grow, and old states are overwritten, "
            "not stored."
        ),
        "zh": (
            "大小核对：一个头的状态是 {K} × {V} 个 fp32 = {head_kib:g} KiB，一层 {layer_kib:g} KiB"
            "（另有 {conv_kib:g} KiB 的短卷积窗口）。第 1 个 token 之后和第 {T} 个 token 之后一样大："
            "状态不会增长，旧的状态被覆盖，而不是被保存。"
        ),
    },
    "state.watch_title": {
        "en": "What to watch",
        "zh": "观察要点",
    },
    "state.watch": {
        "en": (
            "- **The first tokens.** S starts at zero. Its norm rises fast, then levels off where "
            "forgetting (α) balances writing (β).\n"
            "- **Slow and fast heads.** A head whose mean α is close to 1 forgets slowly: its "
            "norm curve is smoother and its heatmap changes less per step.\n"
            "- **Stripes.** Heatmap rows are key channels, and each channel decays by its own α: "
            "rows whose α is close to 1 keep their values and stand out as horizontal stripes.\n"
            "- **Repeated text.** In layer 0 a token's k and v depend only on the last 4 bytes "
            "(the short convolution), so the second *the cat* produces the same k and v as the "
            "first. The delta rule writes only v − Sᵀk, the part S does not already predict: "
            "where the old association survived the decay, the write is smaller.\n"
            "- **No way back.** S after the last token has overwritten every earlier S. To resume "
            "from an earlier position an engine must have *saved* that state (a checkpoint): "
            "this is why prefix caching changes for KDA (article §2.2, §3.2)."
        ),
        "zh": (
            "- **最初几个 token。** S 从零开始。它的范数先快速上升，然后在遗忘（α）与写入（β）"
            "平衡处趋于平稳。\n"
            "- **慢头与快头。** 平均 α 接近 1 的头遗忘得慢：它的范数曲线更平滑，"
            "热力图每一步的变化也更小。\n"
            "- **条纹。** 热力图的每一行是一个 key 通道，每个通道按自己的 α 衰减："
            "α 接近 1 的行会保留数值，显示为横向条纹。\n"
            "- **重复文本。** 在第 0 层，一个 token 的 k 和 v 只取决于最近 4 个字节（短卷积），"
            "所以第二个 *the cat* 产生与第一个相同的 k 和 v。delta 规则只写入 v − Sᵀk，"
            "即 S 尚未预测到的部分：如果旧的关联在衰减后仍然存在，这次写入就更小。\n"
            "- **无法回退。** 最后一个 token 之后的 S 覆盖了之前所有的 S。要从更早的位置继续，"
            "引擎必须*保存*过那个状态（checkpoint）：这就是 KDA 改变前缀缓存的原因"
            "（原文 §2.2、§3.2）。"
        ),
    },
    # ---- figures -----------------------------------------------------------------------------
    "fig.head": {
        "en": "head {h}",
        "zh": "头 {h}",
    },
    "fig.heatmap.title": {
        "en": "S after token {t} ({label}), layer {layer}",
        "zh": "token {t}（{label}）之后的 S，第 {layer} 层",
    },
    "fig.heatmap.delta_title": {
        "en": "ΔS = S_{t} − S_{prev} ({label}), layer {layer}",
        "zh": "ΔS = S_{t} − S_{prev}（{label}），第 {layer} 层",
    },
    "fig.heatmap.x": {
        "en": "value dim v",
        "zh": "value 维 v",
    },
    "fig.heatmap.y": {
        "en": "key dim k",
        "zh": "key 维 k",
    },
    "state.probe_title": {
        "en": "What the state gives back for each query: |cos(S_t^T q, v written by its pair)|",
        "zh": "状态对每个查询的回答：|cos(S_t^T q, 该键值对写入的 v)|",
    },
    "state.probe_trace": {
        "en": "query {qk} → {qv}",
        "zh": "查询 {qk} → {qv}",
    },
    "state.probe_head": {
        "en": "probe head",
        "zh": "探测的 head",
    },
    "state.probe_caption": {
        "en": "Recall prompt detected. Each line is one query: flat until its pair is written (▲), a jump "
              "at the write, then it must survive later writes until the query (★). Layer {layer}, head "
              "{head}; kda_ref.train.probe.retrieval_curve computes it.",
        "zh": "检测到联想回忆提示词。每条线是一个查询：在它的键值对写入（▲）之前是平的，写入时跳起，之后要"
              "经受住后续的写入一直保持到查询处（★）。第 {layer} 层、第 {head} 个 head；由 "
              "kda_ref.train.probe.retrieval_curve 计算。",
    },
    "fig.token_axis": {
        "en": "token",
        "zh": "token",
    },
    "fig.norm.title": {
        "en": "State norm and write size per head, layer {layer}",
        "zh": "各头的状态范数与写入大小，第 {layer} 层",
    },
    "fig.norm.y": {
        "en": "‖S_t‖",
        "zh": "‖S_t‖",
    },
    "fig.write.y": {
        "en": "write ‖S_t − Diag(α_t) S_(t−1)‖",
        "zh": "写入 ‖S_t − Diag(α_t) S_(t−1)‖",
    },
    "fig.gate.title": {
        "en": "Gate: mean decay α = exp(g) and write strength β per head, layer {layer}",
        "zh": "门控：各头的平均衰减 α = exp(g) 与写入强度 β，第 {layer} 层",
    },
    "fig.gate.alpha": {
        "en": "mean α",
        "zh": "平均 α",
    },
    "fig.gate.beta": {
        "en": "β",
        "zh": "β",
    },
    "fig.current": {
        "en": "current token",
        "zh": "当前 token",
    },
    # ---- shared by the step-through pages ----------------------------------------------------
    "nav.concept_map": {
        "en": "Concept-to-source map",
        "zh": "概念与源码对照",
    },
    "cmap.title": {
        "en": "Concept-to-source map",
        "zh": "概念与源码对照表",
    },
    "cmap.intro": {
        "en": "Every idea of the article, where it lives in this repository, and its counterpart in SGLang "
              "and vLLM. The table is the concept map itself (model_viz/concepts.py), the same data every "
              "page's concept panel shows. Type to filter by id, title, section or file.",
        "zh": "文章里的每个概念、它在本仓库中的位置，以及在 SGLang 和 vLLM 中的对应实现。表格就是概念图本身"
              "（model_viz/concepts.py），也是每个页面“概念”面板使用的同一份数据。输入文字可按 id、标题、"
              "章节或文件过滤。",
    },
    "cmap.filter": {
        "en": "filter",
        "zh": "过滤",
    },
    "cmap.no_match": {
        "en": "No concept matches “{query}”.",
        "zh": "没有概念匹配“{query}”。",
    },
    "cmap.col.id": {"en": "id", "zh": "id"},
    "cmap.col.title": {"en": "concept", "zh": "概念"},
    "cmap.col.section": {"en": "article §", "zh": "文章章节"},
    "cmap.col.ours": {"en": "ours", "zh": "本仓库"},
    "cmap.col.sglang": {"en": "SGLang", "zh": "SGLang"},
    "cmap.col.vllm": {"en": "vLLM", "zh": "vLLM"},
    "cmap.order_title": {
        "en": "A minimal reading order",
        "zh": "最小阅读顺序",
    },
    "cmap.order_intro": {
        "en": "To re-implement it, read in this order: the math first, then the layer, the states, memory, "
              "the serving loop, and last the prefix cache that depends on all of them. Step through it.",
        "zh": "如果要自己复现，按这个顺序读：先数学，再层、状态、内存、服务主循环，最后是依赖前面一切的前缀缓存。"
              "逐步浏览。",
    },
    "cmap.step_label": {
        "en": "reading step",
        "zh": "阅读步骤",
    },
    "common.prev": {
        "en": "◀ previous",
        "zh": "◀ 上一步",
    },
    "common.next": {
        "en": "next ▶",
        "zh": "下一步 ▶",
    },
    "common.watch_title": {
        "en": "What to look for",
        "zh": "看点",
    },
    "trace.upload_label": {
        "en": "…or upload a trace (JSONL written by TraceRecorder.write_jsonl / kda-ref)",
        "zh": "……或上传一个 trace（由 TraceRecorder.write_jsonl / kda-ref 写出的 JSONL）",
    },
    "trace.source_canned": {
        "en": "Showing the canned scenario, recorded just now by the engine in `kda_ref/` ({events} events).",
        "zh": "当前显示的是内置场景，刚刚由 `kda_ref/` 中的引擎录制（{events} 个事件）。",
    },
    "trace.source_upload": {
        "en": "Showing the uploaded trace `{name}` ({events} events).",
        "zh": "当前显示的是上传的 trace `{name}`（{events} 个事件）。",
    },
    "trace.err.format": {
        "en": "The uploaded trace cannot be read: {msg}. Showing the canned scenario instead.",
        "zh": "无法读取上传的 trace：{msg}。改为显示内置场景。",
    },
    "trace.err.no_steps": {
        "en": "The uploaded trace has no engine step with a batch (no batch_composition event). "
              "Showing the canned scenario instead.",
        "zh": "上传的 trace 中没有任何带批次的引擎步骤（没有 batch_composition 事件）。改为显示内置场景。",
    },
    "trace.err.too_large": {
        "en": "The uploaded file is {n} bytes; the limit is {max_bytes} bytes. Showing the canned scenario instead.",
        "zh": "上传的文件有 {n} 字节，上限为 {max_bytes} 字节。改为显示内置场景。",
    },
    "trace.step_label": {
        "en": "engine step",
        "zh": "引擎步骤",
    },
    # ---- hybrid execution chain page ---------------------------------------------------------
    "nav.chain": {
        "en": "Hybrid execution chain",
        "zh": "混合执行链",
    },
    "home.page.chain": {
        "en": "step through the engine: who is in each batch, the packed cu_seqlens, and which kernel every layer runs.",
        "zh": "逐步查看引擎：每个批次里有哪些请求、打包后的 cu_seqlens，以及每一层运行了哪个 kernel。",
    },
    "chain.title": {
        "en": "Hybrid execution chain",
        "zh": "混合执行链",
    },
    "chain.intro": {
        "en": (
            "Every engine step, the scheduler picks who runs: a **decode** token for requests that are "
            "generating, and the next **prefill chunk** for requests whose prompt is not yet in the "
            "cache, all under one **token budget**. The new tokens of all of them are packed into ONE "
            "row, described by `cu_seqlens`, and go through the layers once.\n\n"
            "Inside every KDA layer the batch is split by phase: the extend group (prefill chunks) runs "
            "the chunkwise kernel `chunk_kda`, the decode group the recurrent kernel "
            "`fused_recurrent_kda`, each sequence reading and writing its own state slot. The MLA layer "
            "appends every token's latent KV row to its pages and attends over them.\n\n"
            "Below, {n} requests with prompts of {lens} tokens run with a budget of {budget} tokens per "
            "step, so the long prompts are prefilled in chunks mixed with the decodes of the others. "
            "Step through the run."
        ),
        "zh": (
            "引擎每一步都由调度器决定谁来运行：正在生成的请求运行一个 **decode** token，提示词还没有全部进入"
            "缓存的请求运行下一个 **prefill 分块**，它们共用一个 **token 预算**。所有这些新 token 被打包成"
            "**一行**，用 `cu_seqlens` 描述边界，然后一起穿过各层。\n\n"
            "在每个 KDA 层内部，批次按阶段拆开：extend 组（prefill 分块）运行分块 kernel `chunk_kda`，"
            "decode 组运行递推 kernel `fused_recurrent_kda`，每个序列读写自己的状态槽。MLA 层把每个 token "
            "的潜在 KV 行追加到它的页中，并在这些页上做注意力。\n\n"
            "下面，{n} 个请求（提示词长度分别为 {lens} 个 token）在每步 {budget} 个 token 的预算下运行，"
            "因此长提示词会被分块预填充，并与其他请求的 decode 混在一起。请逐步查看这次运行。"
        ),
    },
    "chain.budget_label": {
        "en": "token budget per step (max_num_batched_tokens)",
        "zh": "每步 token 预算（max_num_batched_tokens）",
    },
    "chain.nreq_label": {
        "en": "number of requests",
        "zh": "请求数",
    },
    "chain.current": {
        "en": ("**Step {step}** ({i} of {n}): {seqs} sequences, {tokens} of {budget} budget tokens. "
               "Prefill chunks: {chunks}. Decodes: {decodes}. Admitted this step: {admitted}. "
               "Still waiting: {waiting}."),
        "zh": ("**第 {step} 步**（共 {n} 步中的第 {i} 步）：{seqs} 个序列，用了 {budget} 个预算 token 中的 "
               "{tokens} 个。prefill 分块：{chunks}。decode：{decodes}。本步接纳：{admitted}。"
               "仍在等待：{waiting}。"),
    },
    "chain.finished": {
        "en": "Finished after this step: {reqs}.",
        "zh": "本步之后完成：{reqs}。",
    },
    "chain.preempted": {
        "en": "Preempted in this step: {reqs}.",
        "zh": "本步被抢占：{reqs}。",
    },
    "chain.phase.extend": {
        "en": "extend",
        "zh": "extend",
    },
    "chain.phase.decode": {
        "en": "decode",
        "zh": "decode",
    },
    "chain.fig.batch.title": {
        "en": "Step {step}: the packed batch, cu_seqlens = {cu}",
        "zh": "第 {step} 步：打包后的批次，cu_seqlens = {cu}",
    },
    "chain.fig.batch.x": {
        "en": "position in the packed row of new tokens",
        "zh": "新 token 在打包行中的位置",
    },
    "chain.fig.budget": {
        "en": "budget {n}",
        "zh": "预算 {n}",
    },
    "chain.fig.grid.title": {
        "en": "Step {step}: the kernel each layer ran, per phase group",
        "zh": "第 {step} 步：每一层对每个阶段组运行的 kernel",
    },
    "chain.fig.layer": {
        "en": "layer {layer} · {kind}",
        "zh": "第 {layer} 层 · {kind}",
    },
    "chain.fig.cell": {
        "en": "{seqs} seq · {tokens} tok",
        "zh": "{seqs} 个序列 · {tokens} 个 token",
    },
    "chain.fig.idle": {
        "en": "— not run —",
        "zh": "— 未运行 —",
    },
    "chain.fig.timeline.title": {
        "en": "Tokens per step, by request (hatched: decode); step {step} highlighted",
        "zh": "每步的 token 数，按请求分色（斜线：decode）；高亮第 {step} 步",
    },
    "chain.fig.step": {
        "en": "engine step",
        "zh": "引擎步骤",
    },
    "chain.fig.tokens": {
        "en": "tokens in the batch",
        "zh": "批次中的 token 数",
    },
    "chain.fig.preempted": {
        "en": "r{req} preempted",
        "zh": "r{req} 被抢占",
    },
    "chain.table.title": {
        "en": "The batch metadata of this step (one row per sequence, in batch order)",
        "zh": "本步的批次元数据（每个序列一行，按批次顺序）",
    },
    "chain.col.req": {"en": "request", "zh": "请求"},
    "chain.col.phase": {"en": "phase", "zh": "阶段"},
    "chain.col.new_tokens": {"en": "new tokens", "zh": "新 token 数"},
    "chain.col.context_len": {"en": "context_lens (cached before)", "zh": "context_lens（之前已缓存）"},
    "chain.col.range": {"en": "cu_seqlens range", "zh": "cu_seqlens 区间"},
    "chain.col.state_slot": {"en": "state_indices (slot)", "zh": "state_indices（状态槽）"},
    "chain.col.kv_pages": {"en": "block table (KV pages)", "zh": "block table（KV 页）"},
    "chain.mla_note": {
        "en": ("KDA cells come from the trace's `kernel_dispatch` events. The MLA row is derived from the "
               "batch phases: our MLA layer runs expand-then-attend (`mla_attention_naive`) for extend and "
               "weight-absorbed attention over the latent rows (`mla_attention_absorbed`) for decode."),
        "zh": ("KDA 单元格来自 trace 中的 `kernel_dispatch` 事件。MLA 一行由批次中的阶段推出：本项目的 MLA 层"
               "对 extend 先展开再做注意力（`mla_attention_naive`），对 decode 在潜在行上做权重吸收注意力"
               "（`mla_attention_absorbed`）。"),
    },
    "chain.watch": {
        "en": (
            "- **Chunked prefill.** The first request's prompt is longer than the budget: it takes "
            "several steps, its `context_lens` growing by one chunk each time. Every chunk starts from "
            "the state the previous chunk left in the request's slot — the same slot number every step.\n"
            "- **Mixed batches.** Once a request has its first token it decodes one token per step, in "
            "the same forward as the other requests' prefill chunks: the grid then shows both "
            "`chunk_kda` and `fused_recurrent_kda` in every KDA layer of that step.\n"
            "- **One kernel per phase, not per layer.** Every KDA layer makes the same choice; the "
            "dispatcher picks it from the phase of the group, the layer code never does.\n"
            "- **Raise the budget** to 64: most prompts fit in one step and most of the chunking disappears. "
            "Lower it to 8 and watch decodes squeeze out prefill tokens."
        ),
        "zh": (
            "- **分块预填充。** 第一个请求的提示词比预算长：它要占用好几步，每一步它的 `context_lens` 增长一个"
            "分块。每个分块都从上一个分块留在该请求状态槽中的状态开始——每一步都是同一个槽号。\n"
            "- **混合批次。** 请求一旦得到第一个 token，就每步 decode 一个 token，并与其他请求的 prefill "
            "分块在同一次前向中运行：此时网格在该步的每个 KDA 层中同时显示 `chunk_kda` 和 "
            "`fused_recurrent_kda`。\n"
            "- **按阶段选 kernel，而不是按层。** 每个 KDA 层做出相同的选择；由调度器根据分组的阶段来选，"
            "层的代码从不自己选。\n"
            "- **把预算调到 64**：大多数提示词在一步内放得下，大部分分块消失了。调到 8，可以看到 decode 挤占了 "
            "prefill 的 token。"
        ),
    },
    # ---- three kinds of state page -----------------------------------------------------------
    "nav.three_states": {
        "en": "Three kinds of state",
        "zh": "三种状态",
    },
    "home.page.three_states": {
        "en": "MLA KV that grows per token vs the fixed KDA state and conv window, in bytes, for the tiny and the 48B model.",
        "zh": "随 token 增长的 MLA KV 与固定大小的 KDA 状态和卷积窗口，以字节计，分别针对 tiny 模型和 48B 模型。",
    },
    "states.title": {
        "en": "Three kinds of state",
        "zh": "三种状态",
    },
    "states.intro": {
        "en": (
            "A request of a hybrid KDA + MLA model owns three kinds of cached state:\n\n"
            "- **MLA KV**: one latent row per token per MLA layer. It grows with the sequence, and any "
            "prefix of it is a valid cache for that prefix.\n"
            "- **KDA recurrent state**: per KDA layer, one fp32 K × V matrix per head. Its size does not "
            "depend on the length; it is overwritten every token.\n"
            "- **Conv window**: per KDA layer, the last W − 1 = {w} inputs of the short convolution. Also "
            "fixed, and it must describe the same token boundary as the recurrent state.\n\n"
            "Move the sequence length and compare the bytes of each kind, for the tiny model of this "
            "project and for Kimi-Linear-48B (sizes as served: fp32 state, bf16 conv window and KV). "
            "The dashed line is the break-even length, where the growing KV has caught up with the fixed "
            "state."
        ),
        "zh": (
            "混合 KDA + MLA 模型的一个请求拥有三种缓存状态：\n\n"
            "- **MLA KV**：每个 MLA 层每个 token 一行潜在向量。它随序列增长，而且它的任意前缀都是该前缀的"
            "有效缓存。\n"
            "- **KDA 递推状态**：每个 KDA 层每个头一个 fp32 的 K × V 矩阵。它的大小与长度无关，每个 token "
            "都会被覆盖。\n"
            "- **卷积窗口**：每个 KDA 层保存短卷积最近的 W − 1 = {w} 个输入。它同样是固定大小的，"
            "并且必须与递推状态对应同一个 token 边界。\n\n"
            "拖动序列长度，比较每种状态的字节数：分别针对本项目的 tiny 模型和 Kimi-Linear-48B"
            "（按实际推理时的精度：fp32 状态，bf16 卷积窗口和 KV）。虚线是盈亏平衡长度：在这里，不断增长的 "
            "KV 追上了固定大小的状态。"
        ),
    },
    "states.len_label": {
        "en": "sequence length T (tokens)",
        "zh": "序列长度 T（token 数）",
    },
    "states.scope_toggle": {
        "en": "whole model per sequence (all KDA layers vs all MLA layers) instead of one layer of each",
        "zh": "按整个模型每个序列计算（所有 KDA 层对所有 MLA 层），而不是每种各一层",
    },
    "states.current": {
        "en": ("**T = {T} tokens.** Tiny: MLA KV {tiny_kv}, KDA state + conv {tiny_kda} (break-even at "
               "{tiny_be} tokens). 48B: MLA KV {big_kv}, KDA state + conv {big_kda} (break-even at {big_be} tokens)."),
        "zh": ("**T = {T} 个 token。** tiny：MLA KV {tiny_kv}，KDA 状态 + 卷积 {tiny_kda}（盈亏平衡点 {tiny_be} 个 "
               "token）。48B：MLA KV {big_kv}，KDA 状态 + 卷积 {big_kda}（盈亏平衡点 {big_be} 个 token）。"),
    },
    "states.col.kind": {
        "en": "kind",
        "zh": "种类",
    },
    "states.cfg.tiny": {
        "en": "tiny (this project)",
        "zh": "tiny（本项目）",
    },
    "states.cfg.48b": {
        "en": "Kimi-Linear-48B",
        "zh": "Kimi-Linear-48B",
    },
    "states.kind.mla_kv": {
        "en": "MLA KV (grows)",
        "zh": "MLA KV（增长）",
    },
    "states.kind.kda_recurrent": {
        "en": "KDA recurrent state",
        "zh": "KDA 递推状态",
    },
    "states.kind.conv": {
        "en": "conv window",
        "zh": "卷积窗口",
    },
    "states.kind.kda_total": {
        "en": "KDA state + conv",
        "zh": "KDA 状态 + 卷积",
    },
    "states.fig.title.layer": {
        "en": "Bytes per sequence for ONE KDA layer and ONE MLA layer; T = {T}",
        "zh": "一个 KDA 层与一个 MLA 层每个序列的字节数；T = {T}",
    },
    "states.fig.title.model": {
        "en": "Bytes per sequence for the whole model (all KDA layers, all MLA layers); T = {T}",
        "zh": "整个模型每个序列的字节数（所有 KDA 层、所有 MLA 层）；T = {T}",
    },
    "states.fig.x": {
        "en": "sequence length T (tokens)",
        "zh": "序列长度 T（token 数）",
    },
    "states.fig.y": {
        "en": "{unit}",
        "zh": "{unit}",
    },
    "states.fig.current": {
        "en": "at T",
        "zh": "当前 T",
    },
    "states.fig.break_even": {
        "en": " break-even ≈ {n} tokens",
        "zh": " 盈亏平衡 ≈ {n} 个 token",
    },
    "states.fig.window.title": {
        "en": "After T = {T} tokens: what each kind holds (tiny, W = {W})",
        "zh": "T = {T} 个 token 之后：每种状态保存了什么（tiny，W = {W}）",
    },
    "states.fig.window.x": {
        "en": "token position",
        "zh": "token 位置",
    },
    "states.fig.window.state": {
        "en": "one fixed {H} × {K} × {V} matrix set: a summary of all {T} tokens",
        "zh": "一组固定的 {H} × {K} × {V} 矩阵：对全部 {T} 个 token 的概括",
    },
    "states.table.title": {
        "en": "Bytes at T, per sequence",
        "zh": "T 时每个序列的字节数",
    },
    "states.watch": {
        "en": (
            "- **Short sequences favour MLA, long ones KDA.** Below the break-even length one KDA "
            "layer's state is the larger cache; above it, the MLA layer's KV is, and it keeps growing. "
            "For Kimi-Linear-48B one KDA layer's state (2 MiB + 72 KiB conv) equals one MLA layer's KV at "
            "about 1,900 tokens.\n"
            "- **The state is fixed but not small.** Per sequence the 48B model holds 20 KDA states, "
            "about 41 MiB, before the first token — a pool must budget that per running request.\n"
            "- **Different shapes, different pages.** KV grows by whole pages per `page_size` tokens, "
            "the state is one indivisible unit. That is why a hybrid pool has page kinds (see the memory "
            "pool page).\n"
            "- **Only the KV can be cut.** Any prefix of the KV is a cache for that prefix; the state "
            "(and conv window) exist only for the current boundary."
        ),
        "zh": (
            "- **短序列 MLA 占优，长序列 KDA 占优。** 在盈亏平衡长度以下，一个 KDA 层的状态是更大的缓存；"
            "超过它之后，MLA 层的 KV 更大，而且还在继续增长。对 Kimi-Linear-48B，一个 KDA 层的状态"
            "（2 MiB + 72 KiB 卷积）约等于一个 MLA 层 1900 个 token 的 KV。\n"
            "- **状态固定但并不小。** 48B 模型每个序列在第一个 token 之前就持有 20 个 KDA 状态，约 41 MiB——"
            "内存池必须为每个正在运行的请求预留这部分。\n"
            "- **形状不同，页也不同。** KV 每 `page_size` 个 token 增长一整页，状态则是一个不可分割的单元。"
            "这就是混合内存池要区分页面种类的原因（见内存池页面）。\n"
            "- **只有 KV 可以截断。** KV 的任意前缀都是该前缀的缓存；状态（以及卷积窗口）只存在于当前边界。"
        ),
    },
    # ---- memory pool map page ----------------------------------------------------------------
    "nav.pool_map": {
        "en": "Memory pool map",
        "zh": "内存池分布图",
    },
    "home.page.pool_map": {
        "en": "one byte budget shared by KV pages and state slots, step by step, with the owner of every unit and the preemptions.",
        "zh": "KV 页与状态槽共用一个字节预算：逐步查看每个单元的归属以及发生的抢占。",
    },
    "pool.title": {
        "en": "Memory pool map",
        "zh": "内存池分布图",
    },
    "pool.intro": {
        "en": (
            "The cache memory of a hybrid model holds units of different kinds and sizes: **KDA state "
            "slots** (one per running request, {state_kib} KiB each in the tiny model: all 3 KDA layers' "
            "recurrent states and conv windows) and **MLA KV pages** ({page_kib} KiB each: {page_size} "
            "tokens of latent rows). Here both draw from ONE byte budget, so the split between them "
            "follows the workload.\n\n"
            "The canned run: {n} requests (prompts of {lens} tokens, {gen} generated tokens each) in a "
            "pool with room for exactly {slots} states and the KV pages you choose. The fourth request "
            "waits for a slot, and when the running ones grow past the budget the youngest is "
            "**preempted**: its slot and pages are freed and it starts again from token 0 later."
        ),
        "zh": (
            "混合模型的缓存内存中有不同种类、不同大小的单元：**KDA 状态槽**（每个正在运行的请求一个，tiny "
            "模型中每个 {state_kib} KiB：3 个 KDA 层的递推状态和卷积窗口）和 **MLA KV 页**（每页 {page_kib} "
            "KiB：{page_size} 个 token 的潜在行）。这里二者从**同一个**字节预算中分配，因此它们之间的划分"
            "随负载变化。\n\n"
            "内置场景：{n} 个请求（提示词长度分别为 {lens} 个 token，每个生成 {gen} 个 token），内存池恰好"
            "能放下 {slots} 个状态和你选择的若干 KV 页。第四个请求要等待状态槽；当正在运行的请求增长超过预算时，"
            "最年轻的那个会被**抢占**：它的状态槽和页被释放，之后从第 0 个 token 重新开始。"
        ),
    },
    "pool.pages_label": {
        "en": "budget: {slots} state slots + this many KV pages",
        "zh": "预算：{slots} 个状态槽 + 这么多 KV 页",
    },
    "pool.summary": {
        "en": ("**Step {step}** ({i} of {n}): {used} of {budget} KiB used — states {states} KiB, KV pages "
               "{kv} KiB. Preemptions in the whole run: {pre}."),
        "zh": ("**第 {step} 步**（共 {n} 步中的第 {i} 步）：已用 {budget} KiB 中的 {used} KiB——状态 {states} KiB，"
               "KV 页 {kv} KiB。整次运行中的抢占次数：{pre}。"),
    },
    "pool.events_title": {
        "en": "Memory events of this step",
        "zh": "本步的内存事件",
    },
    "pool.events_none": {
        "en": "no allocation or free in this step",
        "zh": "本步没有分配或释放",
    },
    "pool.ev.preempt": {
        "en": "⚠ **r{req} preempted**: freed {slots} state slot(s) and {pages} KV page(s); back to the queue, to recompute from token 0",
        "zh": "⚠ **r{req} 被抢占**：释放了 {slots} 个状态槽和 {pages} 个 KV 页；回到队列，之后从第 0 个 token 重新计算",
    },
    "pool.ev.slot_alloc": {
        "en": "state slot {slots} allocated to {reqs}",
        "zh": "状态槽 {slots} 分配给 {reqs}",
    },
    "pool.ev.slot_free": {
        "en": "state slot {slots} freed by {reqs}",
        "zh": "{reqs} 释放了状态槽 {slots}",
    },
    "pool.ev.page_alloc": {
        "en": "KV page(s) {pages} allocated to {req}",
        "zh": "KV 页 {pages} 分配给 {req}",
    },
    "pool.ev.page_free": {
        "en": "KV page(s) {pages} freed by {req}",
        "zh": "{req} 释放了 KV 页 {pages}",
    },
    "pool.ev.finished": {
        "en": "r{req} finished (its slot and pages are freed after this step's snapshot)",
        "zh": "r{req} 完成（它的状态槽和页在本步快照之后释放）",
    },
    "pool.kind.kda_state": {
        "en": "KDA state slots",
        "zh": "KDA 状态槽",
    },
    "pool.kind.checkpoint": {
        "en": "checkpoint slots",
        "zh": "checkpoint 槽",
    },
    "pool.kind.mla_kv": {
        "en": "MLA KV pages",
        "zh": "MLA KV 页",
    },
    "pool.kind.short.kda_state": {
        "en": "slot",
        "zh": "槽",
    },
    "pool.kind.short.checkpoint": {
        "en": "ckpt",
        "zh": "ckpt",
    },
    "pool.kind.short.mla_kv": {
        "en": "page",
        "zh": "页",
    },
    "pool.fig.area.title": {
        "en": "Pool use by page kind at the end of every step; step {step} highlighted",
        "zh": "每步结束时按页面种类统计的内存池使用量；高亮第 {step} 步",
    },
    "pool.fig.budget": {
        "en": "budget {kib} KiB",
        "zh": "预算 {kib} KiB",
    },
    "pool.fig.preempted": {
        "en": "r{req} preempted",
        "zh": "r{req} 被抢占",
    },
    "pool.fig.step": {
        "en": "engine step",
        "zh": "引擎步骤",
    },
    "pool.fig.strip.title": {
        "en": "Step {step}: the budget, unit by unit (states from the left, KV pages from the right, free between)",
        "zh": "第 {step} 步：逐个单元看预算（状态从左边、KV 页从右边，中间是空闲）",
    },
    "pool.fig.strip.x": {
        "en": "KiB of the budget",
        "zh": "预算中的 KiB",
    },
    "pool.fig.map.title": {
        "en": "Step {step}: who owns which unit (colour = request, grey = free)",
        "zh": "第 {step} 步：每个单元归谁（颜色 = 请求，灰色 = 空闲）",
    },
    "pool.fig.map.slots": {
        "en": "KDA state slots",
        "zh": "KDA 状态槽",
    },
    "pool.fig.map.pages": {
        "en": "MLA KV pages",
        "zh": "MLA KV 页",
    },
    "pool.strip_note": {
        "en": ("An accounting view: our pool (`kda_ref.memory.UnifiedMemoryPool`) keeps one tensor per kind and "
               "only shares the byte budget; SGLang's `UnifiedKVPool` really places the two sub-pools at the two "
               "ends of one buffer like this."),
        "zh": ("这是一个记账视图：本项目的内存池（`kda_ref.memory.UnifiedMemoryPool`）每种单元各用一个张量，只共享"
               "字节预算；SGLang 的 `UnifiedKVPool` 才真正像这样把两个子池放在同一块缓冲区的两端。"),
    },
    "pool.watch": {
        "en": (
            "- **A state is a big, indivisible unit.** One slot is as large as 44 KV pages here. A new "
            "request is admitted only when a whole slot fits, which is why the fourth request waits.\n"
            "- **KV grows page by page.** Every 16 tokens a running request needs one more page. When "
            "none is left, the scheduler preempts the youngest running request "
            "(`Scheduler._preempt`) and gives its pages to the one that needs them.\n"
            "- **Preemption restarts from token 0.** A KDA state cannot be cut back to an earlier token, so "
            "the victim recomputes its prompt and the tokens it had generated when it is readmitted.\n"
            "- **Change the budget.** With 8 or 10 pages nobody is preempted. With 5 the preemption "
            "comes earlier (step 3); with 7 the same request is preempted twice."
        ),
        "zh": (
            "- **状态是一个大而不可分割的单元。** 这里一个状态槽相当于 44 个 KV 页。只有放得下一整个状态槽时"
            "才会接纳新请求，所以第四个请求要等待。\n"
            "- **KV 一页一页地增长。** 正在运行的请求每 16 个 token 需要再多一页。没有空页时，调度器会抢占"
            "最年轻的正在运行的请求（`Scheduler._preempt`），把它的页交给需要的请求。\n"
            "- **抢占从第 0 个 token 重新开始。** KDA 状态无法退回到更早的 token，所以被抢占的请求在重新被"
            "接纳时要重新计算它的提示词和已经生成的 token。\n"
            "- **改变预算。** 有 8 或 10 页时没有请求被抢占。只有 5 页时抢占来得更早（第 3 步）；7 页时同一个"
            "请求被抢占了两次。"
        ),
    },
    # ---- sequential but segmentable page -----------------------------------------------------
    "nav.segments": {
        "en": "Sequential but segmentable",
        "zh": "顺序计算，但可分段",
    },
    "home.page.segments": {
        "en": "split a sequence anywhere and keep the order: the same state as one pass; swap two segments and it is not.",
        "zh": "在任意位置切分序列并保持顺序：得到与一次性计算相同的状态；交换两段则不然。",
    },
    "seg.title": {
        "en": "Sequential but segmentable",
        "zh": "顺序计算，但可分段",
    },
    "seg.intro": {
        "en": (
            "KDA is a recurrence: the state after token t depends on every earlier token, in order. "
            "Yet a sequence can be processed **in segments**: run the first segment, hand its final "
            "state to the second as its initial state, and so on. The result is the same state as one "
            "pass over the whole sequence, whatever the split points — this is what makes chunked "
            "prefill, prefix caching and resuming from a checkpoint exact. What you cannot do is change "
            "the order.\n\n"
            "Below, one random input sequence of {T} tokens ({H} heads, K = V = {D}) is processed three "
            "ways: in one pass with the token-by-token reference `recurrent_kda`; segment by segment, in "
            "order, with the chunk kernel `chunk_kda` (chunks of {C} tokens); and with two segments "
            "swapped. Pick the split points and step through the segment boundaries."
        ),
        "zh": (
            "KDA 是一个递推：第 t 个 token 之后的状态依赖于之前的每一个 token，而且依赖它们的顺序。"
            "但一个序列可以**分段**处理：先算第一段，把它的最终状态作为第二段的初始状态交给第二段，依此类推。"
            "无论切分点在哪里，结果都与对整个序列一次性计算得到的状态相同——正是这一点让分块预填充、前缀缓存"
            "和从 checkpoint 恢复是精确的。你不能做的是改变顺序。\n\n"
            "下面，一个 {T} 个 token 的随机输入序列（{H} 个头，K = V = {D}）以三种方式处理：用逐 token 的参考实现 "
            "`recurrent_kda` 一次性计算；用分块 kernel `chunk_kda`（每块 {C} 个 token）按顺序逐段计算；以及交换"
            "其中两段后再计算。选择切分点，然后逐个查看各段的边界。"
        ),
    },
    "seg.seed_label": {
        "en": "random sequence (seed)",
        "zh": "随机序列（种子）",
    },
    "seg.splits_label": {
        "en": "split points (token positions)",
        "zh": "切分点（token 位置）",
    },
    "seg.swap_label": {
        "en": "segments to swap",
        "zh": "要交换的两段",
    },
    "seg.head_label": {
        "en": "head",
        "zh": "头",
    },
    "seg.step_label": {
        "en": "segment",
        "zh": "段",
    },
    "seg.err.range": {
        "en": "Split point {s} does not lie strictly between 0 and {T}; pick positions inside the sequence.",
        "zh": "切分点 {s} 不在 0 和 {T} 之间（不含两端）；请选择序列内部的位置。",
    },
    "seg.one_segment": {
        "en": "With no split point there is a single segment: nothing to compare and nothing to swap. Add a split point.",
        "zh": "没有切分点时只有一段：没有可比较的，也没有可交换的。请添加一个切分点。",
    },
    "seg.current": {
        "en": "**Segment {j} of {n}**: tokens {s}..{e}, started from the state after {s} tokens{init}.",
        "zh": "**第 {j} 段（共 {n} 段）**：token {s}..{e}，从前 {s} 个 token 之后的状态开始{init}。",
    },
    "seg.init_zero": {
        "en": " (zero: nothing before it)",
        "zh": "（零状态：之前没有任何 token）",
    },
    "seg.init_prev": {
        "en": ", the final state of segment {p}",
        "zh": "，即第 {p} 段的最终状态",
    },
    "seg.metric.boundary": {
        "en": "max |in order − one pass| here",
        "zh": "此处 max |按序分段 − 一次性|",
    },
    "seg.metric.swapped": {
        "en": "max |swapped − one pass| at the end",
        "zh": "末尾 max |交换后 − 一次性|",
    },
    "seg.metric.chunks": {
        "en": "max |chunk-start states − one pass|",
        "zh": "max |块起点状态 − 一次性|",
    },
    "seg.fig.segment": {
        "en": "segment {n}",
        "zh": "第 {n} 段",
    },
    "seg.fig.one_pass": {
        "en": "one pass: ||S|| after every token",
        "zh": "一次性计算：每个 token 之后的 ||S||",
    },
    "seg.fig.in_order": {
        "en": "segments in order: state after each segment",
        "zh": "按序分段：每段之后的状态",
    },
    "seg.fig.chunk_starts": {
        "en": "chunk-start states (free checkpoints)",
        "zh": "块起点状态（免费的 checkpoint）",
    },
    "seg.fig.swapped": {
        "en": "two segments swapped: final state",
        "zh": "交换两段：最终状态",
    },
    "seg.fig.x": {
        "en": "tokens processed",
        "zh": "已处理的 token 数",
    },
    "seg.fig.y": {
        "en": "||S|| (all heads)",
        "zh": "||S||（所有头）",
    },
    "seg.fig.timeline.title": {
        "en": "The state along the sequence; boundary after segment {j} (token {pos}) highlighted",
        "zh": "沿序列的状态；高亮第 {j} 段之后的边界（token {pos}）",
    },
    "seg.fig.boundary.title": {
        "en": "Head {head}, state after {pos} tokens: segments in order vs one pass (one colour scale)",
        "zh": "头 {head}，前 {pos} 个 token 之后的状态：按序分段 vs 一次性计算（同一色标）",
    },
    "seg.fig.panel.in_order": {
        "en": "in order, after segment {j}",
        "zh": "按序，第 {j} 段之后",
    },
    "seg.fig.panel.one_pass": {
        "en": "one pass, after {pos} tokens",
        "zh": "一次性，前 {pos} 个 token 之后",
    },
    "seg.fig.panel.diff": {
        "en": "difference (max {d})",
        "zh": "差值（最大 {d}）",
    },
    "seg.fig.swap.title": {
        "en": "Head {head}, final state: swapping two segments changes it",
        "zh": "头 {head}，最终状态：交换两段会改变它",
    },
    "seg.fig.panel.final": {
        "en": "one pass, after {T} tokens",
        "zh": "一次性，前 {T} 个 token 之后",
    },
    "seg.fig.panel.swapped": {
        "en": "segments {a} and {b} swapped",
        "zh": "交换第 {a} 段和第 {b} 段",
    },
    "seg.watch": {
        "en": (
            "- **Any split, same state.** Move the split points anywhere: the difference stays at "
            "float32 rounding (about 1e-7), although the segments run with a different kernel (chunked, "
            "matrix products inside each chunk) from the one-pass reference (token by token).\n"
            "- **Order matters.** Swapping two segments feeds the same tokens in another order; the "
            "decay and the delta rule do not commute, so the final state is different — by as much as "
            "the state itself when the swapped segments are recent.\n"
            "- **Free checkpoints.** The purple diamonds are the states at the start of every chunk of "
            "{C} tokens, returned by one `chunk_kda` call (`return_intermediate_states=True`). They lie "
            "exactly on the one-pass curve: a prefix cache can keep them and resume there later.\n"
            "- **Only there.** Between two saved positions nothing can be resumed: the state after token "
            "t exists only if the computation stopped at t and kept it."
        ),
        "zh": (
            "- **任意切分，状态相同。** 把切分点移到任何位置：差值都停留在 float32 舍入误差量级（约 1e-7），"
            "尽管各段用的 kernel（分块、块内矩阵乘）与一次性计算的参考实现（逐 token）不同。\n"
            "- **顺序很重要。** 交换两段，相同的 token 以另一种顺序输入；衰减和 delta 规则不可交换，所以最终"
            "状态不同——当被交换的段离末尾较近时，差值与状态本身一样大。\n"
            "- **免费的 checkpoint。** 紫色菱形是每个 {C} 个 token 的块起点的状态，由一次 `chunk_kda` 调用"
            "（`return_intermediate_states=True`）返回。它们恰好落在一次性计算的曲线上：前缀缓存可以保存它们，"
            "之后从那里继续。\n"
            "- **只能在那里。** 两个保存位置之间无法恢复：第 t 个 token 之后的状态，只有在计算恰好停在 t 并"
            "保存了它时才存在。"
        ),
    },
    # ---- concept panel -----------------------------------------------------------------------
    "concepts.title": {
        "en": "Concepts on this page",
        "zh": "本页涉及的概念",
    },
    "concepts.section": {
        "en": "Article section",
        "zh": "原文章节",
    },
    "concepts.ours": {
        "en": "This project",
        "zh": "本项目",
    },
    "concepts.sglang": {
        "en": "SGLang",
        "zh": "SGLang",
    },
    "concepts.vllm": {
        "en": "vLLM",
        "zh": "vLLM",
    },
    "concepts.fla": {
        "en": "flash-linear-attention",
        "zh": "flash-linear-attention",
    },
    "concepts.none": {
        "en": "no direct counterpart",
        "zh": "无直接对应",
    },
}


def t(key: str, lang: str = DEFAULT_LANG, **fmt) -> str:
    """The string ``key`` in ``lang``, formatted with ``fmt`` when given.

    Raises ``KeyError`` for an unknown key or language (never falls back silently).
    """
    if lang not in LANGS:
        raise KeyError(f"lang: unknown language {lang!r}; expected one of {LANGS}")
    try:
        entry = STRINGS[key]
    except KeyError:
        raise KeyError(f"i18n: no string with key {key!r}") from None
    text = entry[lang]
    return text.format(**fmt) if fmt else text
