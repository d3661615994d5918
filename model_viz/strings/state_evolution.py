"""UI strings of the page ``app_pages/state_evolution.py`` (namespace ``state_evolution.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "state_evolution.nav": {
        "en": "KDA state evolution",
        "zh": "KDA 状态演化",
    },
    "state_evolution.caption": {
        "en": "Watch each KDA head's state matrix change token by token, with its gate and write strength.",
        "zh": "逐 token 观察每个 KDA 头的状态矩阵如何变化，以及它的遗忘门和写入强度。",
    },
    "state_evolution.title": {
        "en": "KDA state evolution",
        "zh": "KDA 状态演化",
    },
    "state_evolution.intro": {
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
    "state_evolution.trained_model": {
        "en": "The model was trained in this repo (docs/training.md) on associative recall and on the repo's "
              "own docs, in the layout chosen above: after each key-value pair the state stores it, and at a query "
              "it gives it back.",
        "zh": "模型在本仓库中训练（见 docs/training.md），任务是联想回忆和仓库自己的文档，结构是上面选择的那种："
              "每个键值对之后状态把它存下，遇到查询时再把它取出来。",
    },
    "state_evolution.prompt_label": {
        "en": "Prompt (UTF-8 bytes are the tokens, at most {max_bytes})",
        "zh": "提示词（每个 UTF-8 字节是一个 token，最多 {max_bytes} 个）",
    },
    "state_evolution.err.empty": {
        "en": "The prompt is empty: type at least one character.",
        "zh": "提示词为空：请至少输入一个字符。",
    },
    "state_evolution.err.too_long": {
        "en": "The prompt is {n} bytes long; the limit is {max_bytes} bytes. Shorten it.",
        "zh": "提示词长 {n} 字节，上限为 {max_bytes} 字节，请缩短。",
    },
    "state_evolution.layer_label": {
        "en": "KDA layer",
        "zh": "KDA 层",
    },
    "state_evolution.prev": {
        "en": "◀ previous",
        "zh": "◀ 上一个",
    },
    "state_evolution.next": {
        "en": "next ▶",
        "zh": "下一个 ▶",
    },
    "state_evolution.step_label": {
        "en": "token position t",
        "zh": "token 位置 t",
    },
    "state_evolution.delta_toggle": {
        "en": "show the change ΔS = S_t − S_(t−1) instead of S_t",
        "zh": "显示变化量 ΔS = S_t − S_(t−1)，而不是 S_t",
    },
    "state_evolution.current": {
        "en": "Token position t = {t} (of {T} tokens, counted from 0): {label} (byte {byte})",
        "zh": "token 位置 t = {t}（共 {T} 个 token，从 0 开始计数）：{label}（字节 {byte}）",
    },
    "state_evolution.bytes": {
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
    "state_evolution.watch_title": {
        "en": "What to watch",
        "zh": "观察要点",
    },
    "state_evolution.watch": {
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
            "this is why prefix caching changes for KDA (docs/article.md §2.2, §3.2). The section "
            "below tries to run the state backwards anyway."
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
            "（docs/article.md §2.2、§3.2）。下面一节尝试强行把状态往回推。"
        ),
    },
    "state_evolution.fig.head": {
        "en": "head {h}",
        "zh": "头 {h}",
    },
    "state_evolution.fig.heatmap.title": {
        "en": "S after token {t} ({label}), layer {layer}",
        "zh": "token {t}（{label}）之后的 S，第 {layer} 层",
    },
    "state_evolution.fig.heatmap.delta_title": {
        "en": "ΔS = S_{t} − S_{prev} ({label}), layer {layer}",
        "zh": "ΔS = S_{t} − S_{prev}（{label}），第 {layer} 层",
    },
    "state_evolution.fig.heatmap.x": {
        "en": "value dim v",
        "zh": "value 维 v",
    },
    "state_evolution.fig.heatmap.y": {
        "en": "key dim k",
        "zh": "key 维 k",
    },
    "state_evolution.probe_title": {
        "en": "What the state gives back for each query: |cos(S_t^T q, v written by its pair)|",
        "zh": "状态对每个查询的回答：|cos(S_t^T q, 该键值对写入的 v)|",
    },
    "state_evolution.probe_trace": {
        "en": "query {qk} → {qv}",
        "zh": "查询 {qk} → {qv}",
    },
    "state_evolution.probe_head": {
        "en": "probe head",
        "zh": "探测的 head",
    },
    "state_evolution.probe_caption": {
        "en": "Recall prompt detected. Each line is one query: flat until its pair is written (▲), a jump "
              "at the write, then it must survive later writes until the query (★). Layer {layer}, head "
              "{head}; kda_ref.train.probe.retrieval_curve computes it.",
        "zh": "检测到联想回忆提示词。每条线是一个查询：在它的键值对写入（▲）之前是平的，写入时跳起，之后要"
              "经受住后续的写入一直保持到查询处（★）。第 {layer} 层、第 {head} 个 head；由 "
              "kda_ref.train.probe.retrieval_curve 计算。",
    },
    "state_evolution.fig.token_axis": {
        "en": "token",
        "zh": "token",
    },
    "state_evolution.fig.norm.title": {
        "en": "State norm and write size per head, layer {layer}",
        "zh": "各头的状态范数与写入大小，第 {layer} 层",
    },
    "state_evolution.fig.norm.y": {
        "en": "‖S_t‖",
        "zh": "‖S_t‖",
    },
    "state_evolution.fig.write.y": {
        "en": "write ‖S_t − Diag(α_t) S_(t−1)‖",
        "zh": "写入 ‖S_t − Diag(α_t) S_(t−1)‖",
    },
    "state_evolution.fig.gate.title": {
        "en": "Gate: mean decay α = exp(g) and write strength β per head, layer {layer}",
        "zh": "门控：各头的平均衰减 α = exp(g) 与写入强度 β，第 {layer} 层",
    },
    "state_evolution.fig.gate.alpha": {
        "en": "mean α",
        "zh": "平均 α",
    },
    "state_evolution.fig.gate.beta": {
        "en": "β",
        "zh": "β",
    },
    "state_evolution.fig.gate.lowest": {
        "en": "lowest channel α",
        "zh": "最小通道 α",
    },
    "state_evolution.fig.gate.floor": {
        "en": "floor e^{lb} = {floor} per step",
        "zh": "下限 e^{lb} = 每步 {floor}",
    },
    "state_evolution.k3_gate": {
        "en": ("Kimi K3's forget gate is bounded: g = {lb}·sigmoid(exp(A_log)·(f + dt_bias)) lies in [{lb}, 0), so no "
               "channel decays by more than a factor e^{lb} = {floor} in one step (the dashed line in the gate plot, "
               "on a log scale, with the lowest channel of every token dotted). Kimi-Linear's softplus gate has no such "
               "floor. A kernel can rely on it: gate sums over a chunk stay finite, and fla and vLLM's FlashKDA take "
               "their bounded-gate paths."),
        "zh": ("Kimi K3 的遗忘门有下界：g = {lb}·sigmoid(exp(A_log)·(f + dt_bias)) 落在 [{lb}, 0) 内，所以任何通道一步最多"
               "衰减到 e^{lb} = {floor} 倍（门图中的虚线，对数坐标；点线是每个 token 最小的通道）。Kimi-Linear 的 softplus "
               "门没有这样的下限。内核可以依赖它：一个分块内门的累加保持有限，fla 和 vLLM 的 FlashKDA 会走有界门的路径。"),
    },
    "state_evolution.fig.current": {
        "en": "current token",
        "zh": "当前 token",
    },
    "state_evolution.archive.title": {
        "en": "A fixed state is not an archive",
        "zh": "固定大小的状态不是档案",
    },
    "state_evolution.archive.intro": {
        "en": "Can the state at an earlier token be recovered from the current one? A serving cache holds only "
              "the state: many different histories end in states it cannot tell apart, since H·K·V numbers "
              "cannot hold every earlier key and value. Here we give the inversion everything a cache does "
              "*not* have, each undone token's k, v, α and β, and invert each step exactly: "
              "S₍ₜ₋₁₎ = Diag(1/α)(I + β/(1−β|k|²)kkᵀ)(Sₜ − βkvᵀ) (kda_ref.state_trace.recover_backwards). The "
              "top plot compares the recovered state with the true one, starting from the stored fp32 state "
              "(red) and from states recomputed in fp64 (blue); the bottom plot shows how much the undone tokens "
              "decayed, for the channel that forgot most and for a typical channel.",
        "zh": "能否从当前状态恢复出更早某个 token 处的状态？服务中的缓存只保存状态本身：许多不同的历史会得到它无法区分的"
              "状态，因为 H·K·V 个数无法容纳之前所有的 key 和 value。这里我们把缓存*没有*的东西都交给逆推：每个被撤销的 "
              "token 的 k、v、α 和 β，并逐步精确求逆：S₍ₜ₋₁₎ = Diag(1/α)(I + β/(1−β|k|²)kkᵀ)(Sₜ − βkvᵀ)"
              "（kda_ref.state_trace.recover_backwards）。上图把恢复出的状态与真实状态比较，分别从保存的 fp32 状态（红）"
              "和用 fp64 重算的状态（蓝）出发；下图显示被撤销的 token 衰减了多少：遗忘最多的通道与一个典型通道。",
    },
    "state_evolution.archive.at_zero": {
        "en": "At the first token there is nothing to recover: before it the state is zero. Step forward.",
        "zh": "在第一个 token 处没有可恢复的内容：它之前的状态为零。请向前步进。",
    },
    "state_evolution.archive.steps": {
        "en": "tokens to undo",
        "zh": "撤销的 token 数",
    },
    "state_evolution.archive.result": {
        "en": "Layer {layer}, from token {t}: fp32 recovers the state within 1 % for **{fp32}** of {steps} tokens "
              "back, fp64 for **{fp64}**. Over one token the most forgetful channel decayed by {decay1}: dividing "
              "by that α multiplies every rounding error in the state by its inverse. What decayed below the "
              "rounding unit is gone. To resume at an earlier position, an engine needs a checkpoint taken there "
              "(the checkpoint-placement page).",
        "zh": "第 {layer} 层，从 token {t} 出发：在往回 {steps} 个 token 中，fp32 能在 1% 误差内恢复 **{fp32}** 个，"
              "fp64 能恢复 **{fp64}** 个。一个 token 内遗忘最多的通道衰减为 {decay1}：除以这个 α 会把状态里的每个舍入误差"
              "放大同样的倍数。衰减到舍入单位以下的内容已经消失。要从更早的位置继续，引擎需要在那里保存过 checkpoint"
              "（见 checkpoint 放置页）。",
    },
    "state_evolution.archive.fig.title": {
        "en": "Running layer {layer} backwards from token {t}",
        "zh": "从 token {t} 往回推第 {layer} 层",
    },
    "state_evolution.archive.fig.err": {
        "en": "relative error",
        "zh": "相对误差",
    },
    "state_evolution.archive.fig.decay": {
        "en": "log10 ∏α",
        "zh": "log10 ∏α",
    },
    "state_evolution.archive.fig.x": {
        "en": "tokens undone",
        "zh": "撤销的 token 数",
    },
    "state_evolution.archive.fig.min": {
        "en": "most forgetful channel",
        "zh": "遗忘最多的通道",
    },
    "state_evolution.archive.fig.median": {
        "en": "median channel",
        "zh": "中位通道",
    },
}
