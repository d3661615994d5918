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
    "common.play": {
        "en": "▶▶ play",
        "zh": "▶▶ 播放",
    },
    "common.pause": {
        "en": "⏸ pause",
        "zh": "⏸ 暂停",
    },
    "common.playing": {
        "en": "Playing: one step every {s} s, stops at the last one.",
        "zh": "播放中：每 {s} 秒前进一步，到最后一步自动停止。",
    },
    "common.step_label": {
        "en": "step",
        "zh": "步骤",
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
    # ---- prefix cache is not a KV cache page ---------------------------------------------------
    "nav.prefix_vs_kv": {
        "en": "Prefix cache ≠ KV cache",
        "zh": "前缀缓存 ≠ KV 缓存",
    },
    "home.page.prefix_vs_kv": {
        "en": "for every shared-prefix length: the KV is always reusable, the KDA state only where a checkpoint "
              "was saved — measured on the engine's radix tree.",
        "zh": "对每一个共享前缀长度：KV 总能复用，KDA 状态只有在保存过 checkpoint 的位置才能复用——在引擎的 "
              "Radix 树上实测。",
    },
    "ptk.title": {
        "en": "A prefix cache is not a KV cache",
        "zh": "前缀缓存不是 KV 缓存",
    },
    "ptk.intro": {
        "en": (
            "An ordinary prefix cache is easy because the **MLA KV is per token**: the KV of the first L "
            "tokens is simply the first L rows of a cached sequence, so *every* prefix of a cached prefix is "
            "cached too. A **KDA state** is one fixed-size matrix per head that is overwritten by every token: "
            "the state after token L exists only if the computation stopped at L and saved it.\n\n"
            "Here the engine (`kda_ref.LLM(prefix_cache=\"radix\")`, tiny model, chunk size {C}) has served one "
            "request of {P} prompt tokens, so its radix tree holds the KV of **T = {T} tokens** and states "
            "only at **{ckpts}** (chunk boundaries the prefill passed, and the end the finished request "
            "donated). Step through the shared length L of a new request: the KV side always reuses L, "
            "the state side restores the deepest checkpoint ≤ L and must **recompute** the rest."
        ),
        "zh": (
            "普通的前缀缓存之所以简单，是因为 **MLA KV 按 token 存储**：前 L 个 token 的 KV 就是某个缓存序列的前 "
            "L 行，因此缓存前缀的*每一个*前缀也都在缓存里。**KDA 状态**是每个头一个固定大小、每个 token 都会"
            "覆盖的矩阵：第 L 个 token 之后的状态，只有当计算恰好停在 L 并保存了它时才存在。\n\n"
            "这里引擎（`kda_ref.LLM(prefix_cache=\"radix\")`，tiny 模型，chunk 大小 {C}）已经处理了一个 {P} "
            "个提示词 token 的请求，于是它的 Radix 树保存了 **T = {T} 个 token** 的 KV，而状态只在 **{ckpts}**"
            "（prefill 经过的 chunk 边界，以及已完成请求捐赠的末尾）。逐步改变新请求共享的长度 L："
            "KV 一侧总能复用 L，状态一侧只能恢复 ≤ L 的最深 checkpoint，其余部分必须**重算**。"
        ),
    },
    "ptk.step_label": {
        "en": "shared prefix length L",
        "zh": "共享前缀长度 L",
    },
    "ptk.current": {
        "en": ("**L = {L}** shared tokens. **MLA KV:** the KV of this prefix is rows 0…{L1} of the cached KV — "
               "reuse all {L}. **KDA state:** the deepest checkpoint ≤ {L} is at **{c}** — restore it and "
               "recompute **{n}** token(s) before the request's own tokens."),
        "zh": ("共享 **L = {L}** 个 token。**MLA KV：**这个前缀的 KV 就是缓存 KV 的第 0…{L1} 行——全部 {L} 个都"
               "可复用。**KDA 状态：**≤ {L} 的最深 checkpoint 在 **{c}**——恢复它，并在请求自己的 token 之前"
               "重算 **{n}** 个 token。"),
    },
    "ptk.verified": {
        "en": ("**Verified on the engine:** a second request sharing L = {L} tokens (+{tail} of its own) "
               "restored **{reused}** tokens from the cache (trace: `copy_on_write` at {reused}), recomputed "
               "{n}, and its output equals a run without prefix cache: same tokens, max |Δlogit| = {d}."),
        "zh": ("**已在引擎上验证：**一个共享 L = {L} 个 token（另有 {tail} 个自己的 token）的第二个请求从缓存"
               "恢复了 **{reused}** 个 token（trace：`copy_on_write` 位于 {reused}），重算 {n} 个，输出与不用"
               "前缀缓存的运行完全一致：token 相同，最大 |Δlogit| = {d}。"),
    },
    "ptk.not_verified": {
        "en": ("The back-off for this L comes from the tree's own `match_prefix`. Real second requests were run "
               "(and checked identical to a run without cache) at L = {ls}: step to one of them."),
        "zh": ("这个 L 的回退结果来自 Radix 树自己的 `match_prefix`。真实的第二个请求在 L = {ls} 处运行过"
               "（并检查了与不用缓存的运行完全一致）：可以跳到其中之一查看。"),
    },
    "ptk.metric.kv": {
        "en": "KV reusable",
        "zh": "可复用的 KV",
    },
    "ptk.metric.state": {
        "en": "state restorable at",
        "zh": "状态可恢复于",
    },
    "ptk.metric.recompute": {
        "en": "tokens to recompute",
        "zh": "需重算的 token",
    },
    "ptk.memory": {
        "en": ("Cost of what is cached: the KV of all {T} tokens is {kv_kib:.1f} KiB; the {n_states} states are "
               "{states_kib:,.0f} KiB ({state_kib:,.0f} KiB each). A state at *every* position, which would make "
               "the state side as flexible as the KV, would take {dense_kib:,.0f} KiB."),
        "zh": ("缓存内容的代价：全部 {T} 个 token 的 KV 为 {kv_kib:.1f} KiB；{n_states} 个状态共 {states_kib:,.0f} KiB"
               "（每个 {state_kib:,.0f} KiB）。若在*每个*位置都保存状态，让状态一侧像 KV 一样灵活，需要 "
               "{dense_kib:,.0f} KiB。"),
    },
    "ptk.row.kv": {
        "en": "MLA KV",
        "zh": "MLA KV",
    },
    "ptk.row.state": {
        "en": "KDA state",
        "zh": "KDA 状态",
    },
    "ptk.leg.kv_reuse": {
        "en": "KV reused (per token)",
        "zh": "复用的 KV（按 token）",
    },
    "ptk.leg.unused": {
        "en": "cached, beyond the shared prefix",
        "zh": "已缓存，但在共享前缀之外",
    },
    "ptk.leg.restore": {
        "en": "covered by the restored checkpoint",
        "zh": "由恢复的 checkpoint 覆盖",
    },
    "ptk.leg.recompute": {
        "en": "recomputed from the checkpoint",
        "zh": "从 checkpoint 开始重算",
    },
    "ptk.leg.checkpoint": {
        "en": "saved state (checkpoint)",
        "zh": "保存的状态（checkpoint）",
    },
    "ptk.hover.kv": {
        "en": "KV rows 0…{L1}: reused as they are",
        "zh": "KV 第 0…{L1} 行：原样复用",
    },
    "ptk.hover.unused": {
        "en": "tokens {L}…{T}: in the cache, not shared by this request",
        "zh": "token {L}…{T}：在缓存中，但此请求不共享",
    },
    "ptk.hover.restore": {
        "en": "the state after token {c}, copied into a fresh slot",
        "zh": "第 {c} 个 token 之后的状态，复制到新的槽位",
    },
    "ptk.hover.recompute": {
        "en": "tokens {c}…{L}: {n} recomputed (their KV is cached, their state is not)",
        "zh": "token {c}…{L}：重算 {n} 个（它们的 KV 已缓存，状态没有）",
    },
    "ptk.hover.checkpoint": {
        "en": "state after token %{{x}} — %{{text}}",
        "zh": "第 %{{x}} 个 token 之后的状态——%{{text}}",
    },
    "ptk.hover.verified": {
        "en": "L = %{{x}}: engine restored %{{y}}, recomputed %{{customdata[0]}}, max |Δlogit| %{{customdata[1]}}",
        "zh": "L = %{{x}}：引擎恢复 %{{y}}，重算 %{{customdata[0]}}，最大 |Δlogit| %{{customdata[1]}}",
    },
    "ptk.op.checkpoint_create": {
        "en": "chunk-start state of the prefill",
        "zh": "prefill 的块起点状态",
    },
    "ptk.op.snapshot": {
        "en": "snapshot at the end of a prefill chunk",
        "zh": "prefill chunk 结束时的快照",
    },
    "ptk.op.donate": {
        "en": "donated by the finished request",
        "zh": "已完成请求捐赠",
    },
    "ptk.strip.title": {
        "en": "A request sharing L = {L} tokens: KV reuses {L}, the state resumes at {c} and recomputes {n}",
        "zh": "共享 L = {L} 个 token 的请求：KV 复用 {L}，状态从 {c} 继续并重算 {n} 个",
    },
    "ptk.stair.title": {
        "en": "Reusable prefix for every L: KV is the diagonal, the state a staircase (L = {L} → {c})",
        "zh": "每个 L 的可复用前缀：KV 是对角线，状态是阶梯（L = {L} → {c}）",
    },
    "ptk.stair.kv": {
        "en": "MLA KV: L",
        "zh": "MLA KV：L",
    },
    "ptk.stair.state": {
        "en": "KDA state: deepest checkpoint ≤ L",
        "zh": "KDA 状态：≤ L 的最深 checkpoint",
    },
    "ptk.stair.verified": {
        "en": "real second request (engine)",
        "zh": "真实的第二个请求（引擎）",
    },
    "ptk.stair.current": {
        "en": "current L",
        "zh": "当前 L",
    },
    "ptk.axis.position": {
        "en": "token position",
        "zh": "token 位置",
    },
    "ptk.axis.shared": {
        "en": "shared prefix length L",
        "zh": "共享前缀长度 L",
    },
    "ptk.axis.reusable": {
        "en": "tokens reusable without recompute",
        "zh": "无需重算即可复用的 token",
    },
    "ptk.watch": {
        "en": (
            "- **The diagonal vs the staircase.** KV reuse grows one for one with L; state reuse only jumps at "
            "the checkpoints. The orange band between them is the recompute a hit still costs.\n"
            "- **On a checkpoint** (L = 16, 32, …) the two agree: nothing to recompute. One token later the "
            "state falls back a whole chunk.\n"
            "- **The last point** is the finished request's donated state: a follow-up that shares everything "
            "resumes exactly there.\n"
            "- **Why not save a state everywhere?** Read the cost line: one state weighs as much as the KV of "
            "hundreds of tokens here."
        ),
        "zh": (
            "- **对角线与阶梯。** KV 的复用随 L 一一增长；状态的复用只在 checkpoint 处跳变。两者之间的橙色带就是"
            "命中之后仍要付出的重算。\n"
            "- **恰在 checkpoint 上**（L = 16、32……）两者一致：无需重算。再多一个 token，状态就要退回整整一个 chunk。\n"
            "- **最后一个点**是已完成请求捐赠的状态：共享全部内容的后续请求恰好从那里继续。\n"
            "- **为什么不在每个位置都保存状态？** 看代价那一行：在这里，一个状态的大小相当于数百个 token 的 KV。"
        ),
    },
    # ---- checkpoint placement page ----------------------------------------------------------------
    "nav.checkpoint_tree": {
        "en": "Checkpoint placement",
        "zh": "checkpoint 的放置",
    },
    "home.page.checkpoint_tree": {
        "en": "the KDA-aware radix tree growing request by request: where checkpoints are kept, tombstones, "
              "branch points, copy-on-write / snapshot / donate / evict, under three policies.",
        "zh": "感知 KDA 的 Radix 树逐个请求地生长：checkpoint 保存在哪里、墓碑节点、分叉点、写时复制 / 快照 / "
              "捐赠 / 驱逐，三种策略对比。",
    },
    "ckpt.title": {
        "en": "Checkpoint placement",
        "zh": "checkpoint 的放置",
    },
    "ckpt.intro": {
        "en": (
            "The engine's prefix cache is a **KDA-aware radix tree**: every node holds the MLA KV of a span of "
            "tokens, and *optionally* one KDA state — a checkpoint — valid at exactly the node's end. Five "
            "requests run one after another: a {S}-token system prompt with a first question (r0), a second "
            "question after the same system prompt (r1), the next turn of r0's conversation (r2), a request "
            "that diverges *inside* the system prompt (r3), and a follow-up of r1's question (r4).\n\n"
            "The memory budget holds only **{slots} states** (active ones included) plus {kv} tokens of KV, "
            "so the cache has to evict. Pick a policy for *where* checkpoints are kept and step through the "
            "requests; the x axis is the token boundary where a node ends (chunk size {C})."
        ),
        "zh": (
            "引擎的前缀缓存是一棵**感知 KDA 的 Radix 树**：每个节点保存一段 token 的 MLA KV，并*可选地*保存一个"
            "恰好在节点末尾有效的 KDA 状态——即 checkpoint。五个请求依次运行：{S} 个 token 的系统提示词加第一个"
            "问题（r0）、同一系统提示词之后的第二个问题（r1）、r0 对话的下一轮（r2）、在系统提示词*内部*就分叉的"
            "请求（r3），以及 r1 问题的后续（r4）。\n\n"
            "内存预算只能容纳 **{slots} 个状态**（含活动状态）外加 {kv} 个 token 的 KV，因此缓存必须驱逐。"
            "选择 checkpoint *放在哪里*的策略，然后逐个请求前进；横轴是节点结束处的 token 边界（chunk 大小 {C}）。"
        ),
    },
    "ckpt.policy_label": {
        "en": "checkpoint policy (LLM(checkpoint_policy=...))",
        "zh": "checkpoint 策略（LLM(checkpoint_policy=...)）",
    },
    "ckpt.policy.chunk": {
        "en": "chunk: every chunk boundary",
        "zh": "chunk：每个 chunk 边界",
    },
    "ckpt.policy.every_n": {
        "en": "every_n: every {I} tokens",
        "zh": "every_n：每 {I} 个 token",
    },
    "ckpt.policy.branch": {
        "en": "branch: branch points only",
        "zh": "branch：只在分叉点",
    },
    "ckpt.policy_help.chunk": {
        "en": "Keep a state at every chunk boundary ({C} tokens) a prefill passes, plus each finished request's end.",
        "zh": "在 prefill 经过的每个 chunk 边界（{C} 个 token）保存状态，外加每个已完成请求的末尾。",
    },
    "ckpt.policy_help.every_n": {
        "en": "Keep a state every {I} tokens (a multiple of the chunk), plus each finished request's end.",
        "zh": "每 {I} 个 token（chunk 的整数倍）保存一个状态，外加每个已完成请求的末尾。",
    },
    "ckpt.policy_help.branch": {
        "en": ("Keep only the ends of finished requests and the branching point a match reports (the last chunk "
               "boundary inside a KV hit without a state), Marconi-style."),
        "zh": "只保存已完成请求的末尾，以及匹配时报告的分叉点（KV 命中范围内最后一个没有状态的 chunk 边界），"
              "即 Marconi 风格。",
    },
    "ckpt.upload_label": {
        "en": "…or upload a checkpoint-tree trace (JSONL from model_viz.checkpoint_tree.record)",
        "zh": "……或上传一个 checkpoint 树的 trace（由 model_viz.checkpoint_tree.record 生成的 JSONL）",
    },
    "ckpt.source_canned": {
        "en": "Showing the canned scenario under policy `{policy}`, recorded just now by the engine ({events} events).",
        "zh": "当前显示策略 `{policy}` 下的内置场景，刚刚由引擎录制（{events} 个事件）。",
    },
    "ckpt.err.no_tree": {
        "en": ("The uploaded trace has no tree snapshots (no `tree_steps` in its header): this page needs a trace "
               "written by model_viz.checkpoint_tree.record. Showing the canned scenario instead."),
        "zh": ("上传的 trace 没有树快照（头部没有 `tree_steps`）：本页需要由 model_viz.checkpoint_tree.record "
               "写出的 trace。改为显示内置场景。"),
    },
    "ckpt.err.bad_tree": {
        "en": "The uploaded trace's tree snapshots cannot be read: {msg}. Showing the canned scenario instead.",
        "zh": "无法读取上传 trace 中的树快照：{msg}。改为显示内置场景。",
    },
    "ckpt.step_label": {
        "en": "after request",
        "zh": "请求之后",
    },
    "ckpt.current": {
        "en": ("**After {r}** ({i} of {n}; {plen} prompt tokens): it restored **{reused}** tokens from a checkpoint "
               "and computed {computed}. {desc}"),
        "zh": "**{r} 之后**（第 {i}/{n} 个；提示词 {plen} 个 token）：从 checkpoint 恢复了 **{reused}** 个 token，"
              "计算了 {computed} 个。{desc}",
    },
    "ckpt.req.r0": {
        "en": "The first request: nothing to match; the tree gets its KV and the states the policy keeps.",
        "zh": "第一个请求：没有可匹配的内容；树得到它的 KV，以及策略保留的状态。",
    },
    "ckpt.req.r1": {
        "en": "Same system prompt, another question: the tree forks after the shared tokens (a branch point).",
        "zh": "相同的系统提示词，另一个问题：树在共享 token 之后分叉（一个分叉点）。",
    },
    "ckpt.req.r2": {
        "en": "The next turn of r0: its prompt is r0's prompt and answer, so r0's donated end state is an exact hit.",
        "zh": "r0 的下一轮：它的提示词就是 r0 的提示词加回答，因此 r0 捐赠的末尾状态是精确命中。",
    },
    "ckpt.req.r3": {
        "en": "Diverges inside the system prompt: a split creates a node without a state, and memory gets tight.",
        "zh": "在系统提示词内部就分叉：切分产生了一个没有状态的节点，内存也开始吃紧。",
    },
    "ckpt.req.r4": {
        "en": "A follow-up of r1's question: how much of r1's path still has a state depends on the policy.",
        "zh": "r1 问题的后续：r1 路径上还有多少状态，取决于策略。",
    },
    "ckpt.metric.states": {
        "en": "checkpoints in the tree",
        "zh": "树中的 checkpoint",
    },
    "ckpt.metric.kv": {
        "en": "KV tokens in the tree",
        "zh": "树中的 KV token",
    },
    "ckpt.metric.bytes": {
        "en": "checkpoint memory",
        "zh": "checkpoint 内存",
    },
    "ckpt.metric.reused": {
        "en": "restored by this request",
        "zh": "本请求恢复的 token",
    },
    "ckpt.events_title": {
        "en": "Cache events of this request",
        "zh": "本请求的缓存事件",
    },
    "ckpt.events_none": {
        "en": "no cache events",
        "zh": "没有缓存事件",
    },
    "ckpt.ev.match": {
        "en": "`match` {r}: KV hit {kv} tokens, deepest state at {st}, branching point {b}",
        "zh": "`match` {r}：KV 命中 {kv} 个 token，最深的状态在 {st}，分叉点 {b}",
    },
    "ckpt.ev.backoff": {
        "en": "`backoff` {r}: from the KV hit {frm} back to the state at {pos}",
        "zh": "`backoff` {r}：从 KV 命中的 {frm} 回退到位于 {pos} 的状态",
    },
    "ckpt.ev.copy_on_write": {
        "en": "`copy_on_write` {r}: checkpoint slot {ckpt} copied into a fresh active slot {active} (resume at {pos})",
        "zh": "`copy_on_write` {r}：checkpoint 槽 {ckpt} 复制到新的活动槽 {active}（从 {pos} 继续）",
    },
    "ckpt.ev.checkpoint_create": {
        "en": "`checkpoint_create` {r}: the prefill's chunk-start state at {pos} saved in slot {ckpt}",
        "zh": "`checkpoint_create` {r}：prefill 在 {pos} 处的块起点状态保存到槽 {ckpt}",
    },
    "ckpt.ev.snapshot": {
        "en": "`snapshot` {r}: a prefill chunk ended at {pos}; the active state was copied into slot {ckpt}",
        "zh": "`snapshot` {r}：一个 prefill chunk 在 {pos} 结束；活动状态复制到槽 {ckpt}",
    },
    "ckpt.ev.donate": {
        "en": "`donate` {r}: finished; its active slot {ckpt} becomes the checkpoint at {pos} (no copy)",
        "zh": "`donate` {r}：已完成；它的活动槽 {ckpt} 直接成为位于 {pos} 的 checkpoint（不复制）",
    },
    "ckpt.ev.evict": {
        "en": "`evict`: memory is short — checkpoint slot {ckpt} (boundary {pos}) dropped; an inner node keeps its KV as a tombstone, a leaf goes",
        "zh": "`evict`：内存不足——丢弃 checkpoint 槽 {ckpt}（边界 {pos}）；内部节点保留 KV 成为墓碑，叶子节点被删除",
    },
    "ckpt.ev.tombstone": {
        "en": "`tombstone`: a state dropped ({why})",
        "zh": "`tombstone`：丢弃一个状态（{why}）",
    },
    "ckpt.leg.kv": {
        "en": "KV span (edge)",
        "zh": "KV 片段（边）",
    },
    "ckpt.leg.path": {
        "en": "path of {r}",
        "zh": "{r} 的路径",
    },
    "ckpt.leg.branch": {
        "en": "branch point",
        "zh": "分叉点",
    },
    "ckpt.leg.checkpoint": {
        "en": "checkpoint (KV + state)",
        "zh": "checkpoint（KV + 状态）",
    },
    "ckpt.leg.kv_only": {
        "en": "KV only (never had a state)",
        "zh": "只有 KV（从未有过状态）",
    },
    "ckpt.leg.tombstone": {
        "en": "tombstone (state evicted)",
        "zh": "墓碑（状态已驱逐）",
    },
    "ckpt.leg.restored": {
        "en": "{r} restored here",
        "zh": "{r} 从这里恢复",
    },
    "ckpt.new": {
        "en": "new in this step",
        "zh": "本步新增",
    },
    "ckpt.hover.node": {
        "en": "tokens %{{customdata[0]}}…%{{customdata[1]}} “%{{customdata[2]}}”<br>state slot: %{{customdata[3]}} %{{customdata[4]}}",
        "zh": "token %{{customdata[0]}}…%{{customdata[1]}} “%{{customdata[2]}}”<br>状态槽：%{{customdata[3]}} %{{customdata[4]}}",
    },
    "ckpt.tree.title": {
        "en": "Radix tree after {r} ({i}/{n}): {states} checkpoints, {kv} KV tokens",
        "zh": "{r} 之后的 Radix 树（{i}/{n}）：{states} 个 checkpoint，{kv} 个 KV token",
    },
    "ckpt.axis.boundary": {
        "en": "token boundary (where a node ends)",
        "zh": "token 边界（节点结束的位置）",
    },
    "ckpt.bar.reused": {
        "en": "restored from a checkpoint",
        "zh": "从 checkpoint 恢复",
    },
    "ckpt.bar.computed": {
        "en": "computed",
        "zh": "计算",
    },
    "ckpt.bar.states": {
        "en": "checkpoints after the request",
        "zh": "请求之后的 checkpoint 数",
    },
    "ckpt.bar.tokens": {
        "en": "prompt tokens",
        "zh": "提示词 token",
    },
    "ckpt.bar.title": {
        "en": "Per request: {r} restored {reused} prompt tokens and computed {computed}",
        "zh": "逐个请求：{r} 恢复了 {reused} 个提示词 token，计算了 {computed} 个",
    },
    "ckpt.watch": {
        "en": (
            "- **Grey open circles** are nodes that never had a state — the upper half of a split (r1 forks the "
            "first path at the end of the shared tokens). A match that ends there must **back off** to a "
            "green node above it.\n"
            "- **Under `chunk`** every chunk boundary gets a state, the budget of states fills at r3, and the "
            "cache starts to **evict** (red crosses: tombstones keep their KV). r4 then finds less of r1's "
            "path with a state than under the sparser policies — the checkpoint-density dilemma.\n"
            "- **Under `branch`** r0 keeps only its end; r1's match reports the branching point and r1's prefill "
            "saves a state exactly there, which r4 restores later.\n"
            "- **r2** always restores r0's donated end state: a conversation's next turn is the best case."
        ),
        "zh": (
            "- **灰色空心圆**是从未有过状态的节点——切分产生的上半部分（r1 在共享 token 的末尾把第一条路径分叉）。"
            "在那里结束的匹配必须**回退**到它上方的绿色节点。\n"
            "- **在 `chunk` 策略下**每个 chunk 边界都有状态，状态预算在 r3 时用满，缓存开始**驱逐**（红色叉：墓碑"
            "保留 KV）。于是 r4 在 r1 的路径上找到的状态比稀疏策略下更少——这就是 checkpoint 密度的两难。\n"
            "- **在 `branch` 策略下** r0 只保留它的末尾；r1 的匹配报告分叉点，r1 的 prefill 恰好在那里保存状态，"
            "之后 r4 恢复的就是它。\n"
            "- **r2** 总是恢复 r0 捐赠的末尾状态：对话的下一轮是最好的情况。"
        ),
    },
    # ---- restore paths page -------------------------------------------------------------------------
    "nav.restore_paths": {
        "en": "Restore paths",
        "zh": "恢复路径",
    },
    "home.page.restore_paths": {
        "en": "match → back-off → boundary check → copy-on-write restore → recompute, step by step; and what "
              "happens when a checkpoint from the wrong boundary is restored.",
        "zh": "匹配 → 回退 → 边界检查 → 写时复制恢复 → 重算，逐步展示；以及恢复了错误边界的 checkpoint 会发生什么。",
    },
    "rst.title": {
        "en": "Restore paths",
        "zh": "恢复路径",
    },
    "rst.intro": {
        "en": (
            "Request A ({P} prompt tokens) has run, so the radix tree holds the KV of its {T} computed tokens "
            "and checkpoints at **{ckpts}** (chunk size {C}). Now request B arrives and shares part of A. "
            "Step through what the engine does to reuse it — every number below is read from the engine's "
            "trace of this run, and B's output is compared with a run without prefix cache.\n\n"
            "Then switch on **break it**: the engine restores a checkpoint that does *not* describe the boundary "
            "of the reused KV, the way a bookkeeping bug would. The boundary check refuses it; the page "
            "bypasses the check on purpose and shows what the answer would have been."
        ),
        "zh": (
            "请求 A（{P} 个提示词 token）已经运行过，因此 Radix 树保存了它已计算的 {T} 个 token 的 KV，以及位于 "
            "**{ckpts}** 的 checkpoint（chunk 大小 {C}）。现在请求 B 到来，与 A 共享一部分。逐步查看引擎为了复用它"
            "做了什么——下面每个数字都读自本次运行的引擎 trace，B 的输出会与不用前缀缓存的运行比较。\n\n"
            "然后打开**破坏它**：引擎恢复一个*并不*描述所复用 KV 边界的 checkpoint，就像簿记出错时那样。边界检查"
            "会拒绝它；本页有意绕过检查，展示答案会变成什么样。"
        ),
    },
    "rst.request_label": {
        "en": "request B",
        "zh": "请求 B",
    },
    "rst.req.mid": {
        "en": "shares 57 tokens of A's prompt (diverges mid-chunk)",
        "zh": "共享 A 提示词的 57 个 token（在 chunk 中间分叉）",
    },
    "rst.req.turn": {
        "en": "the next turn: A's prompt + A's answer + a question",
        "zh": "下一轮：A 的提示词 + A 的回答 + 一个问题",
    },
    "rst.req.short": {
        "en": "shares only 21 tokens",
        "zh": "只共享 21 个 token",
    },
    "rst.break_label": {
        "en": "break it: restore from the wrong boundary",
        "zh": "破坏它：从错误的边界恢复",
    },
    "rst.mode_label": {
        "en": "what goes wrong",
        "zh": "错在哪里",
    },
    "rst.mode.boundary": {
        "en": "the whole state of another checkpoint",
        "zh": "另一个 checkpoint 的整个状态",
    },
    "rst.mode.conv": {
        "en": "right recurrent state, conv windows of another boundary",
        "zh": "递推状态正确，卷积窗口来自另一个边界",
    },
    "rst.step_label": {
        "en": "restore step",
        "zh": "恢复步骤",
    },
    "rst.stepname.arrive": {
        "en": "arrive",
        "zh": "到达",
    },
    "rst.stepname.match": {
        "en": "match",
        "zh": "匹配",
    },
    "rst.stepname.backoff": {
        "en": "back-off",
        "zh": "回退",
    },
    "rst.stepname.check": {
        "en": "boundary check",
        "zh": "边界检查",
    },
    "rst.stepname.restore": {
        "en": "copy-on-write",
        "zh": "写时复制",
    },
    "rst.stepname.recompute": {
        "en": "recompute",
        "zh": "重算",
    },
    "rst.stepname.compare": {
        "en": "result",
        "zh": "结果",
    },
    "rst.step.arrive": {
        "en": ("Request B has **{N}** prompt tokens. The engine will look up its first **{known}** in the cache: "
               "all but the last, whose logits must be computed to sample the first output token."),
        "zh": "请求 B 有 **{N}** 个提示词 token。引擎会在缓存中查找其中前 **{known}** 个：除最后一个以外的全部，"
              "因为最后一个 token 的 logits 必须计算出来才能采样第一个输出 token。",
    },
    "rst.step.match": {
        "en": ("**Match.** Walking the radix tree along B's tokens finds KV for the first **{kv}** tokens — the "
               "answer of an ordinary prefix cache (trace: `match`, kv_len = {kv})."),
        "zh": "**匹配。** 沿 B 的 token 遍历 Radix 树，找到前 **{kv}** 个 token 的 KV——这就是普通前缀缓存的答案"
              "（trace：`match`，kv_len = {kv}）。",
    },
    "rst.step.backoff": {
        "en": ("**Back-off.** A KDA state exists only at checkpoints, so the usable prefix is the deepest one ≤ "
               "{kv}: **{c}** (trace: `match` state_len = {c}). The KV of tokens {c}…{kv} stays in the tree but "
               "cannot be used without recomputing them from the state at {c}."),
        "zh": "**回退。** KDA 状态只存在于 checkpoint 处，所以可用前缀是 ≤ {kv} 的最深 checkpoint：**{c}**"
              "（trace：`match` state_len = {c}）。token {c}…{kv} 的 KV 仍留在树中，但不从 {c} 处的状态重算就无法使用。",
    },
    "rst.step.check_ok": {
        "en": ("**Boundary check.** Before restoring, `RadixPrefixCache.check_boundary` compares the checkpoint's "
               "record — taken when it was saved — with what is being reused: the state after exactly **{c}** "
               "tokens, the conv windows of the same {c} tokens, and {c} KV units. **They agree.**"),
        "zh": "**边界检查。** 恢复之前，`RadixPrefixCache.check_boundary` 把 checkpoint 保存时记录的边界与将要复用"
              "的内容比较：恰好 **{c}** 个 token 之后的状态、同样 {c} 个 token 的卷积窗口，以及 {c} 个 KV 单元。"
              "**一致。**",
    },
    "rst.step.check_bad": {
        "en": ("**Boundary check.** The checkpoint about to be restored describes boundary **{b}**, not {c}. The "
               "engine's check raises `BoundaryMismatchError` (below). **For this demonstration the check is "
               "bypassed** on this one engine instance and the restore goes ahead."),
        "zh": "**边界检查。** 将要恢复的 checkpoint 描述的是边界 **{b}**，而不是 {c}。引擎的检查抛出 "
              "`BoundaryMismatchError`（见下方）。**为了演示，本页在这一个引擎实例上绕过了检查**，恢复照常进行。",
    },
    "rst.step.restore": {
        "en": ("**Copy-on-write.** The checkpoint (slot {ck}) is *copied* into a fresh active slot **{a}**; B "
               "writes only its own slot from now on, so the cached state stays valid for the next hit "
               "(trace: `copy_on_write`). B's block table starts with the tree's {c} KV units."),
        "zh": "**写时复制。** checkpoint（槽 {ck}）被*复制*到一个新的活动槽 **{a}**；此后 B 只写自己的槽，缓存的"
              "状态对下一次命中依然有效（trace：`copy_on_write`）。B 的块表以树中的 {c} 个 KV 单元开头。",
    },
    "rst.step.restore_bad_boundary": {
        "en": ("**Copy-on-write — of the wrong state.** Slot {ck} holds the state after {b} tokens, and it is "
               "copied into the active slot {a} as if it were the state after {c}. The recurrent states differ "
               "by {sd} (relative), the conv windows by {cd}."),
        "zh": "**写时复制——但复制的是错误的状态。** 槽 {ck} 保存的是 {b} 个 token 之后的状态，却被当作 {c} 个 token"
              " 之后的状态复制到活动槽 {a}。递推状态相差 {sd}（相对值），卷积窗口相差 {cd}。",
    },
    "rst.step.restore_bad_conv": {
        "en": ("**Copy-on-write — of a mixed state.** Slot {ck} has the right recurrent state (difference {sd}) "
               "but the conv windows of boundary {b} (difference {cd}): the last inputs the short convolution "
               "sees are not B's."),
        "zh": "**写时复制——但复制的是混合状态。** 槽 {ck} 的递推状态正确（差值 {sd}），但卷积窗口来自边界 {b}"
              "（差值 {cd}）：短卷积看到的最近输入不是 B 的。",
    },
    "rst.step.recompute": {
        "en": ("**Recompute.** The prefill starts at {c} and runs the **{n}** remaining prompt tokens (chunks as "
               "start+tokens: {chunks}) — the {kv_minus_c} shared tokens after the checkpoint and B's own ones — "
               "writing their KV after the reused units."),
        "zh": "**重算。** prefill 从 {c} 开始，运行剩下的 **{n}** 个提示词 token（chunk 以 起点+token 数 表示："
              "{chunks}）——checkpoint 之后的 {kv_minus_c} 个共享 token 以及 B 自己的 token——并把它们的 KV 写在复用的"
              "单元之后。",
    },
    "rst.step.compare": {
        "en": ("**Result.** B generated {G} tokens; **{same} of {G}** equal those of a run without prefix cache, "
               "max |Δlogit| = {dc}: reusing the prefix did not change the answer."),
        "zh": "**结果。** B 生成了 {G} 个 token；其中 **{same}/{G}** 个与不用前缀缓存的运行相同，最大 |Δlogit| = "
              "{dc}：复用前缀没有改变答案。",
    },
    "rst.step.compare_bad": {
        "en": ("**Result.** With the wrong state, **{same} of {G}** tokens match the run without cache and the "
               "logits move by up to **{d}** (a correct restore: {dc}). Nothing crashed — without the boundary "
               "check this would be a silently wrong answer."),
        "zh": "**结果。** 用了错误的状态后，只有 **{same}/{G}** 个 token 与不用缓存的运行相同，logits 最多偏移 "
              "**{d}**（正确恢复时：{dc}）。没有任何崩溃——如果没有边界检查，这就是一个悄无声息的错误答案。",
    },
    "rst.check_raised": {
        "en": "What the engine raises for this restore (`kda_ref.cache.BoundaryMismatchError`):",
        "zh": "引擎对这次恢复抛出的错误（`kda_ref.cache.BoundaryMismatchError`）：",
    },
    "rst.metric.kv": {
        "en": "KV hit",
        "zh": "KV 命中",
    },
    "rst.metric.state": {
        "en": "restored at",
        "zh": "恢复位置",
    },
    "rst.metric.recompute": {
        "en": "recomputed",
        "zh": "重算",
    },
    "rst.row.request": {
        "en": "request B",
        "zh": "请求 B",
    },
    "rst.row.kv": {
        "en": "MLA KV in the tree",
        "zh": "树中的 MLA KV",
    },
    "rst.row.ckpt": {
        "en": "checkpoints",
        "zh": "checkpoint",
    },
    "rst.row.active": {
        "en": "B's active state",
        "zh": "B 的活动状态",
    },
    "rst.leg.prompt": {
        "en": "prompt",
        "zh": "提示词",
    },
    "rst.leg.gen": {
        "en": "generated",
        "zh": "生成",
    },
    "rst.leg.kv": {
        "en": "KV hit",
        "zh": "KV 命中",
    },
    "rst.leg.other": {
        "en": "A's KV, not shared",
        "zh": "A 的 KV，不共享",
    },
    "rst.leg.ckpt": {
        "en": "checkpoint",
        "zh": "checkpoint",
    },
    "rst.leg.wrong": {
        "en": "state actually restored",
        "zh": "实际恢复的状态",
    },
    "rst.leg.check_ok": {
        "en": "boundary check passed",
        "zh": "边界检查通过",
    },
    "rst.leg.check_bad": {
        "en": "boundary check failed (bypassed)",
        "zh": "边界检查失败（已绕过）",
    },
    "rst.leg.restored": {
        "en": "restored (copy)",
        "zh": "恢复（复制）",
    },
    "rst.leg.recompute": {
        "en": "recomputed",
        "zh": "重算",
    },
    "rst.leg.tokens": {
        "en": "same token as without cache?",
        "zh": "与不用缓存时 token 相同？",
    },
    "rst.hover.prompt": {
        "en": "B's {N} prompt tokens",
        "zh": "B 的 {N} 个提示词 token",
    },
    "rst.hover.gen": {
        "en": "{G} generated tokens",
        "zh": "{G} 个生成的 token",
    },
    "rst.hover.kv": {
        "en": "KV of {n} tokens found in the tree",
        "zh": "在树中找到 {n} 个 token 的 KV",
    },
    "rst.hover.other": {
        "en": "tokens {a}…{b}: A's, B goes elsewhere",
        "zh": "token {a}…{b}：属于 A，B 走了另一条路",
    },
    "rst.hover.ckpt": {
        "en": "checkpoint: the state after token %{{x}}",
        "zh": "checkpoint：第 %{{x}} 个 token 之后的状态",
    },
    "rst.hover.wrong": {
        "en": "the state that was copied really describes boundary {b}",
        "zh": "被复制的状态实际描述的是边界 {b}",
    },
    "rst.hover.restored": {
        "en": "checkpoint slot {ck} → active slot {a}: the state after {c} tokens",
        "zh": "checkpoint 槽 {ck} → 活动槽 {a}：{c} 个 token 之后的状态",
    },
    "rst.hover.recompute": {
        "en": "tokens {c}…{N}: {n} recomputed",
        "zh": "token {c}…{N}：重算 {n} 个",
    },
    "rst.hover.token": {
        "en": "token %{{customdata[0]}} (without cache: %{{customdata[1]}})",
        "zh": "token %{{customdata[0]}}（不用缓存时：%{{customdata[1]}}）",
    },
    "rst.fig.arrive": {
        "en": "Request B: {N} prompt tokens",
        "zh": "请求 B：{N} 个提示词 token",
    },
    "rst.fig.match": {
        "en": "Match: the KV of {kv} tokens is in the tree",
        "zh": "匹配：树中有 {kv} 个 token 的 KV",
    },
    "rst.fig.backoff": {
        "en": "Back-off: {kv} → the deepest checkpoint {c}",
        "zh": "回退：{kv} → 最深的 checkpoint {c}",
    },
    "rst.fig.check": {
        "en": "Boundary check at {c}",
        "zh": "在 {c} 处做边界检查",
    },
    "rst.fig.restore": {
        "en": "Copy-on-write: slot {ck} → fresh slot {a}",
        "zh": "写时复制：槽 {ck} → 新槽 {a}",
    },
    "rst.fig.recompute": {
        "en": "Recompute {n} tokens from {c}",
        "zh": "从 {c} 开始重算 {n} 个 token",
    },
    "rst.fig.compare": {
        "en": "Result: generated tokens vs a run without cache",
        "zh": "结果：生成的 token 与不用缓存的运行对比",
    },
    "rst.axis.position": {
        "en": "token position",
        "zh": "token 位置",
    },
    "rst.axis.gen": {
        "en": "generated token",
        "zh": "生成的 token",
    },
    "rst.axis.diff": {
        "en": "max |Δlogit| vs no cache",
        "zh": "与不用缓存相比的最大 |Δlogit|",
    },
    "rst.div.correct": {
        "en": "correct restore",
        "zh": "正确恢复",
    },
    "rst.div.broken": {
        "en": "restore from the wrong boundary",
        "zh": "从错误边界恢复",
    },
    "rst.div.tol": {
        "en": "same answer below {tol}",
        "zh": "低于 {tol} 即答案相同",
    },
    "rst.div.title_ok": {
        "en": "Logits vs a run without cache: max |Δ| = {d}, {same}/{G} tokens equal",
        "zh": "与不用缓存的运行比较 logits：最大 |Δ| = {d}，{same}/{G} 个 token 相同",
    },
    "rst.div.title_broken": {
        "en": "Broken restore: max |Δlogit| = {d}, {same}/{G} tokens equal",
        "zh": "错误恢复：最大 |Δlogit| = {d}，{same}/{G} 个 token 相同",
    },
    "rst.watch": {
        "en": (
            "- **Two lengths, not one.** The match finds KV for {kv} tokens but only {c} are usable: the "
            "back-off is the difference between a prefix cache and a KV cache.\n"
            "- **Three things, one boundary.** The checkpoint must hold the recurrent state *and* the conv "
            "windows after exactly the reused tokens. The engine records each checkpoint's boundary when it "
            "saves it and checks it before every restore.\n"
            "- **Copy, never share.** The cached slot is copied into a fresh active slot; the request then "
            "overwrites its own slot every token.\n"
            "- **Break it** and compare: a wrong boundary, or only the conv windows of another boundary, moves "
            "the logits by O(1) — with no error at all unless the boundary is checked."
        ),
        "zh": (
            "- **两个长度，而不是一个。** 匹配找到 {kv} 个 token 的 KV，但只有 {c} 个可用：回退就是前缀缓存与 KV "
            "缓存的区别。\n"
            "- **三样东西，一个边界。** checkpoint 必须同时保存恰好在复用 token 之后的递推状态*和*卷积窗口。引擎在"
            "保存每个 checkpoint 时记录它的边界，并在每次恢复前检查。\n"
            "- **复制，绝不共享。** 缓存的槽被复制到一个新的活动槽；之后请求每个 token 都覆盖自己的槽。\n"
            "- **破坏它**并比较：错误的边界，或仅仅是来自另一个边界的卷积窗口，都会让 logits 偏移 O(1)——而且除非"
            "检查边界，否则不会有任何报错。"
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
    # ---- vLLM state blocks page ------------------------------------------------------------------------
    "nav.state_blocks": {
        "en": "vLLM state blocks",
        "zh": "vLLM 状态块",
    },
    "home.page.state_blocks": {
        "en": "The vLLM-style block cache: chained hashes per hash unit, the hybrid hit as a fixed point of the KV "
              "group and the state group, null blocks and the one real state block, partial hits with "
              "copy-on-write, retention masks, mode all vs align.",
        "zh": "vLLM 风格的块缓存：按哈希单元计算的链式哈希、KV 组与状态组的混合命中不动点、空块与唯一的真实状态块、"
              "带写时复制的部分命中、保留掩码、all 与 align 模式。",
    },
    "sb.title": {
        "en": "vLLM state blocks",
        "zh": "vLLM 状态块",
    },
    "sb.intro": {
        "en": (
            "vLLM keeps no tree. A prompt is cut into **hash units** of {U} tokens, each named by a **chained "
            "hash** (the parent's hash + the unit's tokens, so one hash names the whole prefix). Two cache groups "
            "share that chain: the **KV group** (MLA latent KV, one page per unit: any unit-aligned prefix is "
            "reusable) and the **state group** (KDA): a *state block* of {B} tokens holds the recurrent + conv "
            "state **at its end**, and only some blocks hold one. A hit must hold in both groups — a **fixed "
            "point**.\n\n"
            "Five requests run one after another on the tiny model (random weights) through "
            "`LLM(prefix_cache=\"block\", block_size={B}, hash_unit={U})`, {budget} tokens per engine step: a "
            "{S}-token system prompt shared three times, one request diverging inside a block, one exact repeat. "
            "Before each request the page reads the hash table, during it the engine's block table and trace, "
            "after it the states the cache holds. Step through the requests; change the mode, the retention and "
            "partial hits above (each choice is a new run)."
        ),
        "zh": (
            "vLLM 不维护树。提示词被切成每个 {U} 个 token 的**哈希单元**，每个单元由一个**链式哈希**命名（父哈希 + "
            "本单元的 token，因此一个哈希就代表整个前缀）。两个缓存组共享这条哈希链：**KV 组**（MLA 潜在 KV，每个"
            "单元一页：任何按单元对齐的前缀都可复用）和**状态组**（KDA）：一个 {B} 个 token 的*状态块*保存的是**块末尾"
            "处**的递推状态与卷积状态，而且只有部分块存有状态。命中必须在两个组中同时成立——这是一个**不动点**。\n\n"
            "五个请求在 tiny 模型（随机权重）上依次运行，使用 "
            "`LLM(prefix_cache=\"block\", block_size={B}, hash_unit={U})`，每个引擎步 {budget} 个 token："
            "一段 {S} 个 token 的系统提示词被共享三次，一个请求在块内部分叉，一个请求完全重复。每个请求之前页面读取"
            "哈希表，运行中读取引擎的块表与 trace，之后读取缓存持有的状态。逐个请求查看；可在上方切换模式、保留策略"
            "和部分命中（每个选择都是一次新的运行）。"
        ),
    },
    "sb.mode_label": {
        "en": "mamba_cache_mode",
        "zh": "mamba_cache_mode",
    },
    "sb.mode.all": {
        "en": "all",
        "zh": "all",
    },
    "sb.mode.align": {
        "en": "align",
        "zh": "align",
    },
    "sb.mode_help.all": {
        "en": "**all**: a state at every block boundary the request passes (the chunk kernel's chunk-start states "
              "provide the ones inside a step).",
        "zh": "**all**：请求经过的每个块边界都有状态（步内的边界由 chunk 内核的 chunk 起始状态提供）。",
    },
    "sb.mode_help.align": {
        "en": "**align**: a state only where a scheduler step ends on a block boundary; a {budget}-token chunk is "
              "cut down to a block boundary and the last cacheable block is forced.",
        "zh": "**align**：只在调度步恰好结束于块边界时有状态；{budget} 个 token 的分块被截到块边界，并强制最后一个"
              "可缓存的块。",
    },
    "sb.retention_label": {
        "en": "Retention (retention_interval)",
        "zh": "保留策略（retention_interval）",
    },
    "sb.ret.dense": {
        "en": "dense (None)",
        "zh": "稠密（None）",
    },
    "sb.ret.interval": {
        "en": "interval {N}",
        "zh": "间隔 {N}",
    },
    "sb.ret.reachable": {
        "en": "reachable (0)",
        "zh": "可达（0）",
    },
    "sb.ret_help.dense": {
        "en": "**Dense** keeps every state the mode produces.",
        "zh": "**稠密**保留模式产生的每个状态。",
    },
    "sb.ret_help.interval": {
        "en": "**Interval {N}** keeps one state per {N} tokens plus the reachable boundaries.",
        "zh": "**间隔 {N}** 每 {N} 个 token 保留一个状态，另加可达边界。",
    },
    "sb.ret_help.reachable": {
        "en": "**Reachable** keeps only shared-prefix junctions and the replay point (held pending, committed at "
              "finish).",
        "zh": "**可达**只保留共享前缀的分叉点和重放点（先作为待定状态持有，结束时提交）。",
    },
    "sb.partial_label": {
        "en": "partial hits",
        "zh": "部分命中",
    },
    "sb.partial_help.on": {
        "en": "**Partial hits on**: a state may also sit on a {U}-token unit boundary inside a block (junctions, "
              "the prompt's last unit).",
        "zh": "**部分命中开启**：状态也可以位于块内部的 {U} token 单元边界上（分叉点、提示词的最后一个单元）。",
    },
    "sb.partial_help.off": {
        "en": "**Partial hits off**: states only at block ends; junctions are rounded down to a block (units of "
              "{U} tokens still name the KV).",
        "zh": "**部分命中关闭**：状态只在块末尾；分叉点向下取整到块（KV 仍按 {U} token 的单元命名）。",
    },
    "sb.running": {
        "en": "Running the five requests with and without the cache…",
        "zh": "正在分别在有缓存和无缓存的情况下运行五个请求……",
    },
    "sb.verified": {
        "en": "Checked on this run: all {n} outputs equal the same prompts run without a cache (identical tokens, "
              "max |Δ logit| {diff}); for every request the replayed fixed point equals the engine's hit and its "
              "cached_prompt_tokens, the engine's block table is null blocks + the hit's slot, every saved state "
              "is one the retention keeps.",
        "zh": "本次运行已核验：全部 {n} 个输出与无缓存运行相同提示词的结果一致（token 完全相同，最大 |Δ logit| "
              "{diff}）；每个请求重放的不动点等于引擎的命中及其 cached_prompt_tokens，引擎的块表是空块 + 命中的槽位，"
              "每个保存的状态都是保留策略要保留的。",
    },
    "sb.step_label": {
        "en": "Request",
        "zh": "请求",
    },
    "sb.current": {
        "en": "**{r}** ({i}/{n}): {plen} prompt tokens — **{hit}** reused, **{computed}** computed. {desc}",
        "zh": "**{r}**（{i}/{n}）：提示词 {plen} 个 token——复用 **{hit}** 个，计算 **{computed}** 个。{desc}",
    },
    "sb.req.r0": {
        "en": "The system prompt + question 1: nothing is cached yet.",
        "zh": "系统提示词 + 问题 1：此时什么都没有缓存。",
    },
    "sb.req.r1": {
        "en": "The same system prompt + question 2: the KV group matches up to the junction, the state group only "
              "up to the last state before it.",
        "zh": "相同的系统提示词 + 问题 2：KV 组一直匹配到分叉点，状态组只能到分叉点之前的最后一个状态。",
    },
    "sb.req.r2": {
        "en": "Diverges at token 44, inside block 1 (tokens 32–64) of the system prompt.",
        "zh": "在第 44 个 token 处分叉，位于系统提示词的第 1 块（token 32–64）内部。",
    },
    "sb.req.r3": {
        "en": "The system prompt + question 3: with partial hits it resumes from the state r1 saved at its "
              "junction, inside a block.",
        "zh": "系统提示词 + 问题 3：开启部分命中时，它从 r1 在分叉点（块内部）保存的状态继续。",
    },
    "sb.req.r4": {
        "en": "An exact repeat of r0's prompt.",
        "zh": "与 r0 的提示词完全相同。",
    },
    "sb.metric.kv": {
        "en": "KV group match (tokens)",
        "zh": "KV 组匹配（token）",
    },
    "sb.metric.hit": {
        "en": "Hybrid hit (tokens)",
        "zh": "混合命中（token）",
    },
    "sb.metric.states": {
        "en": "States cached after it",
        "zh": "之后缓存的状态数",
    },
    "sb.metric.bytes": {
        "en": "Their bytes (tiny model)",
        "zh": "其字节数（tiny 模型）",
    },
    "sb.partial_callout": {
        "en": "**Partial hit**: {r} resumes from a state at token {pos}, *inside* block {block}. The cached "
              "state (slot {src}) is never written: it is copied into the request's own running slot {dst} "
              "(copy-on-write) before the forward continues from there.",
        "zh": "**部分命中**：{r} 从第 {pos} 个 token 处的状态继续，该位置在第 {block} 块*内部*。缓存的状态（槽位 "
              "{src}）从不被写入：在前向从那里继续之前，它先被复制到请求自己的运行槽位 {dst}（写时复制）。",
    },
    "sb.axis.tokens": {
        "en": "token position (grid = block boundaries)",
        "zh": "token 位置（网格线 = 块边界）",
    },
    "sb.row.kv": {
        "en": "KV group: hash units →",
        "zh": "KV 组：哈希单元 →",
    },
    "sb.row.state": {
        "en": "state group: ← search",
        "zh": "状态组：← 搜索",
    },
    "sb.leg.kv_hit": {
        "en": "unit cached, matched left to right",
        "zh": "单元已缓存，从左到右匹配",
    },
    "sb.leg.kv_unreachable": {
        "en": "unit cached after a miss (unusable)",
        "zh": "未命中之后的已缓存单元（不可用）",
    },
    "sb.leg.kv_miss": {
        "en": "unit not cached",
        "zh": "单元未缓存",
    },
    "sb.hover.unit": {
        "en": "hash unit {idx}: tokens {a}–{b}",
        "zh": "哈希单元 {idx}：token {a}–{b}",
    },
    "sb.leg.scan.none": {
        "en": "scanned: not cached",
        "zh": "已扫描：未缓存",
    },
    "sb.leg.scan.kv_only": {
        "en": "scanned: KV, no state",
        "zh": "已扫描：有 KV，无状态",
    },
    "sb.leg.scan.skipped": {
        "en": "scanned: state inside a block (partial hits off)",
        "zh": "已扫描：块内部的状态（部分命中关闭）",
    },
    "sb.leg.scan.hit": {
        "en": "the state found",
        "zh": "找到的状态",
    },
    "sb.hover.scan.none": {
        "en": "boundary %{{x}}: not cached (scan step %{{customdata[0]}})",
        "zh": "边界 %{{x}}：未缓存（扫描第 %{{customdata[0]}} 步）",
    },
    "sb.hover.scan.kv_only": {
        "en": "boundary %{{x}}: KV cached, no state here — keep searching left (scan step %{{customdata[0]}})",
        "zh": "边界 %{{x}}：KV 已缓存，这里没有状态——继续向左搜索（扫描第 %{{customdata[0]}} 步）",
    },
    "sb.hover.scan.skipped": {
        "en": "boundary %{{x}}: a state inside a block, not usable without partial hits (scan step "
              "%{{customdata[0]}})",
        "zh": "边界 %{{x}}：块内部的状态，未开启部分命中时不可用（扫描第 %{{customdata[0]}} 步）",
    },
    "sb.hover.scan.hit": {
        "en": "boundary %{{x}}: the last state at or before the KV match — the state group's answer (scan step "
              "%{{customdata[0]}})",
        "zh": "边界 %{{x}}：不超过 KV 匹配的最后一个状态——状态组的答案（扫描第 %{{customdata[0]}} 步）",
    },
    "sb.leg.has_state": {
        "en": "unit holding a state",
        "zh": "存有状态的单元",
    },
    "sb.vline.known": {
        "en": "candidate {n}",
        "zh": "候选 {n}",
    },
    "sb.vline.kv": {
        "en": "KV {n}",
        "zh": "KV {n}",
    },
    "sb.vline.hit": {
        "en": "hit {n}",
        "zh": "命中 {n}",
    },
    "sb.vline.end": {
        "en": "end {n}",
        "zh": "末尾 {n}",
    },
    "sb.hit.title": {
        "en": "{r} ({i}/{n}): the KV group matches {kv} tokens left to right, the state group searches right to "
              "left → hit = {hit} (fixed point after {rounds} rounds)",
        "zh": "{r}（{i}/{n}）：KV 组从左到右匹配 {kv} 个 token，状态组从右到左搜索 → 命中 = {hit}（{rounds} 轮后"
              "达到不动点）",
    },
    "sb.row.table": {
        "en": "logical block table",
        "zh": "逻辑块表",
    },
    "sb.row.active": {
        "en": "running state",
        "zh": "运行中的状态",
    },
    "sb.row.saved": {
        "en": "saved by this request",
        "zh": "本请求保存的",
    },
    "sb.row.after": {
        "en": "cache afterwards",
        "zh": "之后的缓存",
    },
    "sb.leg.null": {
        "en": "null block (no physical state)",
        "zh": "空块（没有物理状态）",
    },
    "sb.hover.null": {
        "en": "block {b} (tokens {a}–{e}): a null block — part of the logical prefix, no state behind it",
        "zh": "第 {b} 块（token {a}–{e}）：空块——属于逻辑前缀，但背后没有状态",
    },
    "sb.leg.real": {
        "en": "the hit's real state block",
        "zh": "命中的真实状态块",
    },
    "sb.hover.real": {
        "en": "block {b}: the one real block — checkpoint slot {slot}, the state after {p} tokens",
        "zh": "第 {b} 块：唯一的真实块——checkpoint 槽位 {slot}，即 {p} 个 token 之后的状态",
    },
    "sb.text.slot": {
        "en": "slot {slot}",
        "zh": "槽位 {slot}",
    },
    "sb.leg.compute": {
        "en": "computed by this request",
        "zh": "由本请求计算",
    },
    "sb.hover.compute": {
        "en": "tokens {a}–{e}: computed by this request",
        "zh": "token {a}–{e}：由本请求计算",
    },
    "sb.text.active": {
        "en": "active slot {slot}",
        "zh": "活动槽位 {slot}",
    },
    "sb.text.fresh": {
        "en": "fresh slot (from zero)",
        "zh": "新槽位（从零开始）",
    },
    "sb.leg.active": {
        "en": "the request's running state",
        "zh": "请求运行中的状态",
    },
    "sb.hover.active": {
        "en": "the running state advances from token {a} to {e}",
        "zh": "运行中的状态从 token {a} 推进到 {e}",
    },
    "sb.leg.step_end": {
        "en": "a scheduler step ends",
        "zh": "调度步结束",
    },
    "sb.hover.step_end": {
        "en": "a scheduler step ended at %{{x}}",
        "zh": "一个调度步在 %{{x}} 结束",
    },
    "sb.op.checkpoint_create": {
        "en": "checkpoint_create",
        "zh": "checkpoint_create（步内）",
    },
    "sb.op.snapshot": {
        "en": "snapshot",
        "zh": "snapshot（步末）",
    },
    "sb.op.commit": {
        "en": "commit",
        "zh": "commit（提交）",
    },
    "sb.op.donate": {
        "en": "donate",
        "zh": "donate（捐赠）",
    },
    "sb.op.pending": {
        "en": "pending replay point",
        "zh": "待定重放点",
    },
    "sb.hover.saved": {
        "en": "%{{customdata[0]}} at %{{x}} → checkpoint slot %{{customdata[1]}}",
        "zh": "%{{customdata[0]}}，位置 %{{x}} → checkpoint 槽位 %{{customdata[1]}}",
    },
    "sb.hover.pending": {
        "en": "pending replay point at %{{x}}: held, committed at finish if no later state replaces it",
        "zh": "位于 %{{x}} 的待定重放点：先持有，若之后没有状态取代它，结束时提交",
    },
    "sb.leg.after": {
        "en": "state held by the cache on this path",
        "zh": "缓存在此路径上持有的状态",
    },
    "sb.hover.after": {
        "en": "after the request the cache holds a state at %{{x}} (slot %{{customdata[0]}})",
        "zh": "请求结束后缓存在 %{{x}} 持有一个状态（槽位 %{{customdata[0]}}）",
    },
    "sb.text.cow": {
        "en": "copy-on-write: slot {src} → slot {dst}",
        "zh": "写时复制：槽位 {src} → 槽位 {dst}",
    },
    "sb.table.title": {
        "en": "{r}: block table = {nulls} null block(s) + {real} real state block; {saved} state(s) saved during "
              "the request",
        "zh": "{r}：块表 = {nulls} 个空块 + {real} 个真实状态块；请求期间保存了 {saved} 个状态",
    },
    "sb.row.offered": {
        "en": "produced (mode {mode})",
        "zh": "产生的（模式 {mode}）",
    },
    "sb.row.saved_here": {
        "en": "saved in this run",
        "zh": "本次运行保存的",
    },
    "sb.leg.keep": {
        "en": "boundary kept",
        "zh": "保留的边界",
    },
    "sb.leg.drop": {
        "en": "boundary dropped",
        "zh": "丢弃的边界",
    },
    "sb.hover.keep": {
        "en": "boundary %{{x}}: kept",
        "zh": "边界 %{{x}}：保留",
    },
    "sb.hover.drop": {
        "en": "boundary %{{x}}: dropped",
        "zh": "边界 %{{x}}：丢弃",
    },
    "sb.leg.reach": {
        "en": "reachable (junction / replay point)",
        "zh": "可达（分叉点 / 重放点）",
    },
    "sb.leg.offered": {
        "en": "a state existed here",
        "zh": "此处曾有状态",
    },
    "sb.leg.saved": {
        "en": "saved",
        "zh": "已保存",
    },
    "sb.ret.title": {
        "en": "{r}: block boundaries beyond the hit {bs}; {name} keeps {kept}; saved in this run: {saved}",
        "zh": "{r}：命中之后的块边界 {bs}；{name} 保留 {kept}；本次运行保存：{saved}",
    },
    "sb.bar.reused": {
        "en": "prompt tokens reused",
        "zh": "复用的提示词 token",
    },
    "sb.bar.computed": {
        "en": "prompt tokens computed",
        "zh": "计算的提示词 token",
    },
    "sb.bar.states": {
        "en": "states in the cache",
        "zh": "缓存中的状态数",
    },
    "sb.bar.tokens": {
        "en": "tokens",
        "zh": "token 数",
    },
    "sb.bar.title": {
        "en": "Reuse per request — {r}: {reused} reused, {computed} computed",
        "zh": "每个请求的复用——{r}：复用 {reused}，计算 {computed}",
    },
    "sb.events_title": {
        "en": "Cache events of this request",
        "zh": "本请求的缓存事件",
    },
    "sb.events_none": {
        "en": "no cache events",
        "zh": "没有缓存事件",
    },
    "sb.ev.match": {
        "en": "step {step} · **match** {r}: KV group {kv} tokens, state group {st} tokens ({rounds} rounds) · "
              "`{concept}`",
        "zh": "第 {step} 步 · **match** {r}：KV 组 {kv} 个 token，状态组 {st} 个 token（{rounds} 轮）· `{concept}`",
    },
    "sb.ev.partial_hit": {
        "en": "step {step} · **partial_hit** {r} at {pos}: inside a block, slot {ckpt} · `{concept}`",
        "zh": "第 {step} 步 · **partial_hit** {r}，位置 {pos}：在块内部，槽位 {ckpt} · `{concept}`",
    },
    "sb.ev.copy_on_write": {
        "en": "step {step} · **copy_on_write** {r}: slot {ckpt} → active slot {active} (state after {pos} tokens) · "
              "`{concept}`",
        "zh": "第 {step} 步 · **copy_on_write** {r}：槽位 {ckpt} → 活动槽位 {active}（{pos} 个 token 之后的状态）· "
              "`{concept}`",
    },
    "sb.ev.checkpoint_create": {
        "en": "step {step} · **checkpoint_create** {r} at {pos}: a chunk-start state inside the step → slot {ckpt} · "
              "`{concept}`",
        "zh": "第 {step} 步 · **checkpoint_create** {r}，位置 {pos}：步内的 chunk 起始状态 → 槽位 {ckpt} · "
              "`{concept}`",
    },
    "sb.ev.snapshot": {
        "en": "step {step} · **snapshot** {r} at {pos}: the state at a step end → slot {ckpt} · `{concept}`",
        "zh": "第 {step} 步 · **snapshot** {r}，位置 {pos}：步末的状态 → 槽位 {ckpt} · `{concept}`",
    },
    "sb.ev.pending": {
        "en": "step {step} · **pending** {r} at {pos}: held as the replay point (slot {ckpt}), not kept by the "
              "retention · `{concept}`",
        "zh": "第 {step} 步 · **pending** {r}，位置 {pos}：作为重放点持有（槽位 {ckpt}），保留策略不保留它 · "
              "`{concept}`",
    },
    "sb.ev.commit": {
        "en": "step {step} · **commit** {r} at {pos}: the replay point enters the cache at finish (slot {ckpt}) · "
              "`{concept}`",
        "zh": "第 {step} 步 · **commit** {r}，位置 {pos}：请求结束时重放点进入缓存（槽位 {ckpt}）· `{concept}`",
    },
    "sb.ev.donate": {
        "en": "step {step} · **donate** {r} at {pos}: the finished request's running slot becomes a cached state "
              "(slot {ckpt}) · `{concept}`",
        "zh": "第 {step} 步 · **donate** {r}，位置 {pos}：结束请求的运行槽位成为缓存状态（槽位 {ckpt}）· `{concept}`",
    },
    "sb.ev.evict": {
        "en": "step {step} · **evict**: slot {ckpt} freed ({policy}) · `{concept}`",
        "zh": "第 {step} 步 · **evict**：释放槽位 {ckpt}（{policy}）· `{concept}`",
    },
    "sb.watch": {
        "en": (
            "- **r1**: the KV group matches 80 tokens (the system prompt's last full {U}-token unit), but no "
            "state sits at 80 — the state group walks right to left to the last state before it, and the second "
            "pass of the fixed point confirms it. The block table is then *null blocks + one real block*: the "
            "logical prefix is long, the physical state is one slot, copied into the request's own slot.\n"
            "- **r3 with partial hits**: r1 saved a state at its junction (80, inside a {B}-token block), so r3 "
            "resumes there — a *partial hit*. Switch partial hits off: the junction is rounded down to a block "
            "and r3 reuses less.\n"
            "- **Mode all vs align**: under `all` r0 leaves a state at every block boundary; under `align` only "
            "where a step ends on one (the black ticks) — fewer states, same answers.\n"
            "- **Retention**: the bottom figure applies `retention_mask` to each request's boundaries for all three "
            "settings; the marked row is the run's. Under `interval {N}` or `reachable`, a boundary that is not "
            "kept becomes the *pending* replay point (purple ring) and only the last one is committed at finish. "
            "Under `reachable`, r1 misses entirely: the first divergence from a path has no junction state yet."
        ),
        "zh": (
            "- **r1**：KV 组匹配 80 个 token（系统提示词最后一个完整的 {U} token 单元），但 80 处没有状态——状态组从"
            "右向左找到它之前的最后一个状态，不动点的第二轮确认了它。于是块表是*若干空块 + 一个真实块*：逻辑前缀"
            "很长，物理状态只有一个槽位，并被复制到请求自己的槽位。\n"
            "- **开启部分命中时的 r3**：r1 在分叉点（80，位于一个 {B} token 的块内部）保存了状态，所以 r3 从那里"
            "继续——*部分命中*。关闭部分命中：分叉点向下取整到块，r3 复用得更少。\n"
            "- **all 与 align 模式**：在 `all` 下 r0 在每个块边界都留下状态；在 `align` 下只在某一步恰好结束于块"
            "边界时才有（黑色刻度）——状态更少，答案相同。\n"
            "- **保留策略**：最下面的图对每个请求的边界分别按三种设置应用 `retention_mask`；带标记的行是本次运行"
            "的设置。在 `间隔 {N}` 或 `可达` 下，未保留的边界成为*待定*重放点（紫色圆环），结束时只提交最后一个。"
            "在 `可达` 下 r1 完全未命中：一条路径上的第一次分叉还没有分叉点状态。"
        ),
    },
    # ---- checkpoint density page ------------------------------------------------------------------------
    "nav.density": {
        "en": "Checkpoint density and policies",
        "zh": "Checkpoint 密度与策略",
    },
    "home.page.density": {
        "en": "Interval vs memory vs recompute at 48B sizes: the cost model's break-even table, the simulator "
              "live (retention, budget, LRU vs Marconi) and the benchmark of every workload family × budget × "
              "policy.",
        "zh": "48B 规模下的间隔、内存与重算：成本模型的盈亏平衡表、实时模拟器（保留策略、预算、LRU 与 Marconi），"
              "以及所有负载族 × 预算 × 策略的基准结果。",
    },
    "dn.title": {
        "en": "Checkpoint density and policies",
        "zh": "Checkpoint 密度与策略",
    },
    "dn.intro": {
        "en": (
            "How often should the cache keep a KDA state? At Kimi-Linear-48B's sizes one state is **{mib} MiB** "
            "(20 KDA layers, fp32) while the MLA KV is **{kv} B per token** (7 layers): one state weighs as much "
            "as **{be} tokens** of KV. Dense checkpoints make every hit land close to a state but cost far more "
            "memory than the KV they accompany; sparse ones save memory but a hit resumes from the last state "
            "before the shared prefix and recomputes the rest. This page shows the trade-off three ways: the "
            "cost model's arithmetic, the simulator live on a seeded workload, and the benchmark results."
        ),
        "zh": (
            "缓存应该多久保留一个 KDA 状态？在 Kimi-Linear-48B 的规模下，一个状态是 **{mib} MiB**（20 个 KDA 层，"
            "fp32），而 MLA KV 是**每个 token {kv} B**（7 层）：一个状态相当于 **{be} 个 token** 的 KV。稠密的 "
            "checkpoint 让每次命中都落在状态附近，但占用的内存远多于其对应的 KV；稀疏的 checkpoint 省内存，但命中"
            "只能从共享前缀之前的最后一个状态继续，其余部分要重算。本页从三个角度展示这一权衡：成本模型的算术、"
            "在固定种子负载上实时运行的模拟器，以及基准测试结果。"
        ),
    },
    "dn.cost.header": {
        "en": "1. The cost model: memory vs recompute per interval",
        "zh": "1. 成本模型：每种间隔的内存与重算",
    },
    "dn.metric.state": {
        "en": "One KDA state (48B)",
        "zh": "一个 KDA 状态（48B）",
    },
    "dn.metric.kv": {
        "en": "MLA KV per token (48B)",
        "zh": "每个 token 的 MLA KV（48B）",
    },
    "dn.metric.break_even": {
        "en": "Break-even: tokens of KV per state",
        "zh": "盈亏平衡：每个状态相当的 KV token 数",
    },
    "dn.cost.n_label": {
        "en": "Checkpoint every N tokens",
        "zh": "每 N 个 token 一个 checkpoint",
    },
    "dn.cost.leg.ratio": {
        "en": "checkpoint bytes ÷ KV bytes of the same span",
        "zh": "checkpoint 字节 ÷ 同一跨度的 KV 字节",
    },
    "dn.cost.leg.recompute": {
        "en": "mean recompute per hit (ms, right axis)",
        "zh": "每次命中的平均重算（毫秒，右轴）",
    },
    "dn.cost.leg.selected": {
        "en": "N = {N}",
        "zh": "N = {N}",
    },
    "dn.cost.hover.ratio": {
        "en": "N = %{{x}}: a checkpoint costs %{{y:.2f}}× the KV of its span",
        "zh": "N = %{{x}}：一个 checkpoint 是其跨度 KV 的 %{{y:.2f}} 倍",
    },
    "dn.cost.hover.recompute": {
        "en": "N = %{{x}}: %{{y:.2f}} ms of prefill recomputed per hit on average",
        "zh": "N = %{{x}}：每次命中平均重算 %{{y:.2f}} 毫秒的 prefill",
    },
    "dn.cost.break_even": {
        "en": "break-even: N = {n} tokens",
        "zh": "盈亏平衡：N = {n} 个 token",
    },
    "dn.cost.title": {
        "en": "A checkpoint every {N} tokens costs {r}× the KV of the same span; a hit recomputes {ms} ms on average",
        "zh": "每 {N} 个 token 一个 checkpoint，占同一跨度 KV 的 {r} 倍；一次命中平均重算 {ms} 毫秒",
    },
    "dn.cost.x": {
        "en": "checkpoint interval N (tokens, log)",
        "zh": "checkpoint 间隔 N（token，对数）",
    },
    "dn.cost.y": {
        "en": "state bytes ÷ KV bytes (log)",
        "zh": "状态字节 ÷ KV 字节（对数）",
    },
    "dn.cost.y2": {
        "en": "recompute per hit (ms)",
        "zh": "每次命中的重算（毫秒）",
    },
    "dn.table.n": {
        "en": "N (tokens)",
        "zh": "N（token）",
    },
    "dn.table.ratio": {
        "en": "state ÷ KV of the span",
        "zh": "状态 ÷ 跨度 KV",
    },
    "dn.table.state": {
        "en": "states, MiB per 1k tokens",
        "zh": "状态，每 1k token 的 MiB",
    },
    "dn.table.kv": {
        "en": "KV, MiB per 1k tokens",
        "zh": "KV，每 1k token 的 MiB",
    },
    "dn.table.tokens": {
        "en": "mean tokens recomputed per hit",
        "zh": "每次命中平均重算的 token",
    },
    "dn.table.ms": {
        "en": "their prefill (ms)",
        "zh": "其 prefill（毫秒）",
    },
    "dn.cost.caption": {
        "en": "A hit at a uniformly random position between two checkpoints N apart recomputes (N − 1) / 2 tokens "
              "on average, priced at a prefix of {at} tokens with the cost model's assumed H200-class 989 TFLOP/s "
              "at 40% utilisation (`kda_ref.cache.cost.CostModel`): assumptions for comparing intervals, not "
              "measurements.",
        "zh": "在相距 N 的两个 checkpoint 之间的均匀随机位置命中，平均重算 (N − 1) / 2 个 token；按前缀长度 {at} "
              "个 token、成本模型假定的 H200 级 989 TFLOP/s、40% 利用率计价（`kda_ref.cache.cost.CostModel`）："
              "这是用于比较间隔的假设，不是测量值。",
    },
    "dn.sim.header": {
        "en": "2. The simulator, live",
        "zh": "2. 实时模拟器",
    },
    "dn.sim.text": {
        "en": "{n} requests of a seeded `scale=\"large\"` workload ({n_long} for long-document QA, whose prompts "
              "are ~22k tokens) run through the engine's own block cache "
              "(`kda_ref.sim.CacheSimulator`: no model, the pool's accounting at 48B sizes; block {B} tokens, "
              "hash unit {U}, mode `all`, partial hits on). Pick the retention and the memory budget: the bars "
              "compare every retention at this budget, the highlighted one is yours.",
        "zh": "一个固定种子的 `scale=\"large\"` 负载中的 {n} 个请求（长文档问答的提示词约 22k token，取 {n_long} 个），"
              "经过引擎自己的块缓存运行"
              "（`kda_ref.sim.CacheSimulator`：不运行模型，按 48B 规模计算显存池；块 {B} 个 token，哈希单元 {U}，"
              "模式 `all`，开启部分命中）。选择保留策略和内存预算：柱状图比较该预算下的所有保留策略，高亮的是你的选择。",
    },
    "dn.family_label": {
        "en": "Workload family",
        "zh": "负载族",
    },
    "dn.family.shared_system_prompt": {
        "en": "shared system prompt",
        "zh": "共享系统提示词",
    },
    "dn.family.multi_turn": {
        "en": "multi-turn chat",
        "zh": "多轮对话",
    },
    "dn.family.tree_search": {
        "en": "agent tree search",
        "zh": "智能体树搜索",
    },
    "dn.family.few_shot": {
        "en": "few-shot",
        "zh": "少样本",
    },
    "dn.family.long_document_qa": {
        "en": "long-document QA",
        "zh": "长文档问答",
    },
    "dn.eviction_label": {
        "en": "Eviction",
        "zh": "淘汰策略",
    },
    "dn.eviction.lru": {
        "en": "LRU",
        "zh": "LRU",
    },
    "dn.eviction.marconi": {
        "en": "Marconi (alpha = 1)",
        "zh": "Marconi（alpha = 1）",
    },
    "dn.interval_label": {
        "en": "Retention (checkpoint interval)",
        "zh": "保留策略（checkpoint 间隔）",
    },
    "dn.interval.dense": {
        "en": "dense ({B})",
        "zh": "稠密（{B}）",
    },
    "dn.interval.reachable": {
        "en": "reachable (0)",
        "zh": "可达（0）",
    },
    "dn.interval.n": {
        "en": "every {N}",
        "zh": "每 {N}",
    },
    "dn.budget_label": {
        "en": "Memory budget (KV + states, 48B sizes)",
        "zh": "内存预算（KV + 状态，48B 规模）",
    },
    "dn.sim.running": {
        "en": "Simulating every retention at this budget…",
        "zh": "正在模拟该预算下的每种保留策略……",
    },
    "dn.sim.failed": {
        "en": "The simulator cannot serve this workload at this budget for every retention: {msg}. Pick a larger "
              "budget.",
        "zh": "在该预算下，模拟器无法为每种保留策略运行该负载：{msg}。请选择更大的预算。",
    },
    "dn.metric.hit_rate": {
        "en": "Token hit rate",
        "zh": "token 命中率",
    },
    "dn.metric.flops": {
        "en": "Prefill FLOPs saved",
        "zh": "节省的 prefill FLOPs",
    },
    "dn.metric.mean_ckpt": {
        "en": "Checkpoints held (mean)",
        "zh": "持有的 checkpoint（平均）",
    },
    "dn.metric.peak_help": {
        "en": "peak {peak} GiB",
        "zh": "峰值 {peak} GiB",
    },
    "dn.metric.evictions": {
        "en": "States evicted",
        "zh": "被淘汰的状态",
    },
    "dn.metric.ttft": {
        "en": "Estimated TTFT (mean)",
        "zh": "估计的首 token 延迟（平均）",
    },
    "dn.sim.caption": {
        "en": "{n} requests simulated in {wall} s for this setting ({wall_all} s for all six; cached afterwards).",
        "zh": "该设置模拟了 {n} 个请求，用时 {wall} 秒（六种设置共 {wall_all} 秒；之后使用缓存）。",
    },
    "dn.sweep.hit": {
        "en": "token hit rate",
        "zh": "token 命中率",
    },
    "dn.sweep.flops": {
        "en": "prefill FLOPs saved",
        "zh": "节省的 prefill FLOPs",
    },
    "dn.sweep.ckpt": {
        "en": "checkpoints held ÷ budget (mean)",
        "zh": "持有的 checkpoint ÷ 预算（平均）",
    },
    "dn.sweep.hover.ckpt": {
        "en": "%{{x}}: checkpoints hold %{{y:.0%}} of the budget on average (%{{customdata[0]:.2f}} GiB), "
              "%{{customdata[1]}} evictions",
        "zh": "%{{x}}：checkpoint 平均占预算的 %{{y:.0%}}（%{{customdata[0]:.2f}} GiB），淘汰 %{{customdata[1]}} 次",
    },
    "dn.sweep.title": {
        "en": "{b} GiB: {name} → hit rate {hit}, FLOPs saved {flops}",
        "zh": "{b} GiB：{name} → 命中率 {hit}，节省 FLOPs {flops}",
    },
    "dn.sweep.y": {
        "en": "share",
        "zh": "比例",
    },
    "dn.sweep.x": {
        "en": "retention",
        "zh": "保留策略",
    },
    "dn.bench.header": {
        "en": "3. Benchmark: every family × budget × policy",
        "zh": "3. 基准测试：所有负载族 × 预算 × 策略",
    },
    "dn.bench.text": {
        "en": "`docs/bench/workloads.csv`, written by `{cmd}`: the simulator at 48B sizes for the radix policies "
              "(chunk, every-1024, branch), the block cache's retentions (dense, interval, reachable), Marconi "
              "(reachable + utility eviction, alpha tuned) and ours. One chart per metric; colours are fixed per "
              "policy.",
        "zh": "`docs/bench/workloads.csv`，由 `{cmd}` 生成：在 48B 规模下用模拟器比较基数树策略（chunk、every-1024、"
              "branch）、块缓存的保留策略（稠密、间隔、可达）、Marconi（可达 + 效用淘汰，alpha 自动调节）以及我们的"
              "策略。每个指标一张图；每个策略的颜色固定。",
    },
    "dn.bench.missing": {
        "en": "`{path}` is not there yet. Produce it with `{cmd}` (every workload family × memory budget × policy "
              "in the simulator at 48B sizes), then reload this page.",
        "zh": "`{path}` 还不存在。请用 `{cmd}` 生成它（在 48B 规模下用模拟器运行所有负载族 × 内存预算 × 策略），"
              "然后重新加载本页。",
    },
    "dn.bench.bad": {
        "en": "`{path}` cannot be read: {msg}. Regenerate it with `kda-ref bench workloads`.",
        "zh": "无法读取 `{path}`：{msg}。请用 `kda-ref bench workloads` 重新生成。",
    },
    "dn.bench.family_label": {
        "en": "Benchmark workload family",
        "zh": "基准测试的负载族",
    },
    "dn.bench.hit.title": {
        "en": "{family}: token hit rate per policy vs memory budget",
        "zh": "{family}：各策略的 token 命中率随内存预算的变化",
    },
    "dn.bench.flops.title": {
        "en": "{family}: prefill FLOPs saved per policy vs memory budget",
        "zh": "{family}：各策略节省的 prefill FLOPs 随内存预算的变化",
    },
    "dn.bench.x": {
        "en": "memory budget (GiB)",
        "zh": "内存预算（GiB）",
    },
    "dn.bench.hit.y": {
        "en": "token hit rate",
        "zh": "token 命中率",
    },
    "dn.bench.flops.y": {
        "en": "prefill FLOPs saved",
        "zh": "节省的 prefill FLOPs",
    },
    "dn.bench.table": {
        "en": "The rows of this family",
        "zh": "该负载族的数据行",
    },
    "dn.tiny.header": {
        "en": "4. The tiny engine, verified",
        "zh": "4. tiny 引擎（已核验）",
    },
    "dn.tiny.text": {
        "en": "`docs/bench/prefix_cache.csv` (`kda-ref bench prefix-cache`): the real engine on the tiny model with "
              "the radix cache under each checkpoint policy and byte budget, every output compared with a run "
              "without cache. Bars: share of the prompt tokens reused; bar labels: what those checkpoints would "
              "weigh at 48B sizes (GiB).",
        "zh": "`docs/bench/prefix_cache.csv`（`kda-ref bench prefix-cache`）：真实引擎在 tiny 模型上使用基数树缓存，"
              "按每种 checkpoint 策略和字节预算运行，每个输出都与无缓存运行比较。柱：复用的提示词 token 比例；柱上"
              "标注：这些 checkpoint 在 48B 规模下的大小（GiB）。",
    },
    "dn.tiny.missing": {
        "en": "`{path}` is not there: run `kda-ref bench prefix-cache` to produce it.",
        "zh": "`{path}` 不存在：运行 `kda-ref bench prefix-cache` 生成它。",
    },
    "dn.tiny.workload_label": {
        "en": "Workload",
        "zh": "负载",
    },
    "dn.tiny.budget": {
        "en": "budget {mb} MB",
        "zh": "预算 {mb} MB",
    },
    "dn.tiny.hover": {
        "en": "%{{x}}: %{{y:.0%}} of the prompt tokens reused; the checkpoints would take %{{text}} GiB at 48B",
        "zh": "%{{x}}：复用了 %{{y:.0%}} 的提示词 token；这些 checkpoint 在 48B 下将占 %{{text}} GiB",
    },
    "dn.tiny.title": {
        "en": "Tiny engine, {w}: prompt tokens reused per policy and budget",
        "zh": "tiny 引擎，{w}：各策略与预算下复用的提示词 token",
    },
    "dn.tiny.y": {
        "en": "prompt tokens reused",
        "zh": "复用的提示词 token",
    },
    "dn.tiny.same": {
        "en": "Every row of this file produced the same tokens as the run without cache.",
        "zh": "该文件的每一行都产生了与无缓存运行相同的 token。",
    },
    "dn.tiny.not_same": {
        "en": "Some rows of this file did NOT produce the same tokens as the run without cache — see the CSV.",
        "zh": "该文件中有些行产生的 token 与无缓存运行不同——请查看 CSV。",
    },
    "dn.watch": {
        "en": (
            "- **The cost curve** crosses 1 at the break-even interval: below it the states of a prefix weigh "
            "more than its KV. At N = 64 (a state per chunk) they weigh 84× the KV; at 4096, 1.3×.\n"
            "- **Dense at a small budget** fills the memory with states that are rarely reused and evicts the "
            "useful ones — long-document QA is the clearest case. Sparse and reachable retention keep the hit "
            "rate with a fraction of the states.\n"
            "- **FLOPs saved** follow the hit rate but weigh long prefixes more (MLA attention grows with the "
            "position): that is what Marconi's eviction and alpha tuning optimise, not the hit rate.\n"
            "- **With a large budget** nothing is evicted and all retentions reuse about the same; what differs "
            "is the memory the states hold."
        ),
        "zh": (
            "- **成本曲线**在盈亏平衡间隔处穿过 1：低于它时，前缀的状态比其 KV 更重。N = 64（每个 chunk 一个状态）"
            "时是 KV 的 84 倍；4096 时为 1.3 倍。\n"
            "- **小预算下的稠密策略**会用很少被复用的状态填满内存，并把有用的状态淘汰——长文档问答最明显。稀疏和可达"
            "保留策略用一小部分状态就能维持命中率。\n"
            "- **节省的 FLOPs** 与命中率同向，但更偏重长前缀（MLA 注意力随位置增长）：Marconi 的淘汰和 alpha 调节"
            "优化的是它，而不是命中率。\n"
            "- **预算很大时**不会发生淘汰，各种保留策略的复用大致相同；不同的是状态占用的内存。"
        ),
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
