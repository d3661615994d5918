"""UI strings of the page ``app_pages/swa_vs_kda.py`` (namespace ``swa_vs_kda.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "swa_vs_kda.nav": {
        "en": "SWA vs KDA caching",
        "zh": "SWA 与 KDA 的缓存",
    },
    "swa_vs_kda.caption": {
        "en": "Pick a position: a sliding-window layer's cache there is cut out of any longer cached KV; a KDA "
              "state exists only where a checkpoint was taken.",
        "zh": "选一个位置：滑动窗口层在那里的缓存可以从任何更长的缓存 KV 中截取；KDA 状态只在保存过 checkpoint 的"
              "位置存在。",
    },
    "swa_vs_kda.title": {
        "en": "Why SWA checkpointing does not carry over to KDA",
        "zh": "为什么 SWA 的 checkpoint 方法不能用于 KDA",
    },
    "swa_vs_kda.intro": {
        "en": "Engines already cache a layer whose state is not the whole KV: sliding-window attention (SWA). "
              "Its cache after t tokens is the KV rows of the last W tokens, [t − W, t). Each row depends only "
              "on the tokens before it, so any cached prefix at least t long contains that window exactly, and "
              "a hit may stop at any position. A KDA layer's cache after t tokens is one folded state S_t: it "
              "exists only if a checkpoint was taken at t.\n\n"
              "Request A ({P} prompt tokens, prefilled in steps of {S}) has run on the engine with the chosen "
              "checkpoint policy (chunk size {C}). Pick a position t: a request B that shares A's first t "
              "tokens then arrives at the same engine, and the page shows what each kind of layer could "
              "restore. The tiny model has no SWA layer; its MLA layer's KV rows, the same kind of per-token "
              "record, stand in for one.",
        "zh": "引擎已经在缓存一种“状态不是完整 KV”的层：滑动窗口注意力（SWA）。它在 t 个 token 之后的缓存是最近 W 个 "
              "token 的 KV 行，即 [t − W, t)。每一行只依赖它之前的 token，所以任何长度至少为 t 的缓存前缀都精确地包含"
              "这个窗口，命中可以停在任意位置。KDA 层在 t 个 token 之后的缓存是一个折叠后的状态 S_t：只有在 t 处保存过 "
              "checkpoint 它才存在。\n\n"
              "请求 A（{P} 个提示词 token，按每步 {S} 个分块 prefill）已经在使用所选 checkpoint 策略的引擎上运行过"
              "（chunk 大小 {C}）。选一个位置 t：随后一个与 A 共享前 t 个 token 的请求 B 到达同一个引擎，页面显示每种层"
              "能恢复什么。tiny 模型没有 SWA 层；它的 MLA 层的 KV 行是同一种逐 token 记录，用来代替 SWA 层。",
    },
    "swa_vs_kda.policy_label": {
        "en": "KDA checkpoint policy",
        "zh": "KDA checkpoint 策略",
    },
    "swa_vs_kda.policy.sglang": {
        "en": "SGLang extra_buffer (one tracked state per prefill step)",
        "zh": "SGLang extra_buffer（每个 prefill 步一个跟踪状态）",
    },
    "swa_vs_kda.policy.chunk": {
        "en": "dense: every chunk boundary",
        "zh": "稠密：每个 chunk 边界",
    },
    "swa_vs_kda.policy.branch": {
        "en": "branch points and finished requests only",
        "zh": "只在分叉点和已完成请求处",
    },
    "swa_vs_kda.window_label": {
        "en": "SWA window W",
        "zh": "SWA 窗口 W",
    },
    "swa_vs_kda.position_label": {
        "en": "position t (B shares A's first t tokens)",
        "zh": "位置 t（B 与 A 共享前 t 个 token）",
    },
    "swa_vs_kda.swa_ok": {
        "en": "**SWA:** the window at t = {t} is rows {lo} to {last}, all among A's cached rows. Cut out of the "
              "cache they equal a fresh run over the first {t} tokens (max difference {diff}): nothing to "
              "recompute.",
        "zh": "**SWA：** t = {t} 处的窗口是第 {lo} 到 {last} 行，全都在 A 的缓存行之中。从缓存中截取出来的这些行与对前 "
              "{t} 个 token 重新运行得到的行相同（最大差值 {diff}）：无需重算。",
    },
    "swa_vs_kda.swa_missing": {
        "en": "**SWA:** the cache kept A's rows only up to {held} (this policy keeps KV up to the state it "
              "donated), so the window at t = {t} is not all there: the hit stops at {held}.",
        "zh": "**SWA：** 缓存只保留了 A 到第 {held} 个位置的 KV 行（该策略只把 KV 保留到它捐献的状态处），所以 t = {t} "
              "处的窗口不完整：命中止于 {held}。",
    },
    "swa_vs_kda.kda_exact": {
        "en": "**KDA:** a checkpoint was taken at exactly t = {t}: the engine restores it and recomputes nothing.",
        "zh": "**KDA：** 恰好在 t = {t} 处保存过 checkpoint：引擎恢复它，无需重算。",
    },
    "swa_vs_kda.kda_backoff": {
        "en": "**KDA:** there is no state at t = {t}. The engine's match backs off to the checkpoint at "
              "c = {c} and prefills the {n} tokens [{c}, {t}) again, although their KV is cached.",
        "zh": "**KDA：** t = {t} 处没有状态。引擎的匹配回退到 c = {c} 处的 checkpoint，并重新 prefill [{c}, {t}) 这 "
              "{n} 个 token，尽管它们的 KV 已被缓存。",
    },
    "swa_vs_kda.kda_backoff_nokv": {
        "en": "**KDA:** there is no state at t = {t}, and the cache kept A's KV only up to {kv}: the engine "
              "restores the checkpoint at c = {c} and prefills the {n} tokens [{c}, {t}) again.",
        "zh": "**KDA：** t = {t} 处没有状态，而且缓存只保留了 A 到 {kv} 的 KV：引擎恢复 c = {c} 处的 checkpoint，并重新 "
              "prefill [{c}, {t}) 这 {n} 个 token。",
    },
    "swa_vs_kda.kda_none": {
        "en": "**KDA:** no checkpoint at or before t = {t}: the engine prefills B from the start.",
        "zh": "**KDA：** t = {t} 处及之前没有 checkpoint：引擎从头 prefill B。",
    },
    "swa_vs_kda.kda_later": {
        "en": "The checkpoint at {p} is useless for t = {t}: it differs from the state after {t} tokens by "
              "{diff} (relative), and a state cannot be run backwards (see the state-evolution page).",
        "zh": "位于 {p} 的 checkpoint 对 t = {t} 没有用：它与 {t} 个 token 之后的状态相差 {diff}（相对值），而状态无法"
              "倒推（见状态演化页）。",
    },
    "swa_vs_kda.fig.timeline_title": {
        "en": "What each layer needs to resume at t = {t} (W = {W})",
        "zh": "每种层在 t = {t} 处继续所需的内容（W = {W}）",
    },
    "swa_vs_kda.fig.swa_lane": {
        "en": "SWA layer (KV rows)",
        "zh": "SWA 层（KV 行）",
    },
    "swa_vs_kda.fig.kda_lane": {
        "en": "KDA layer (state)",
        "zh": "KDA 层（状态）",
    },
    "swa_vs_kda.fig.window": {
        "en": "window [{lo}, {hi})",
        "zh": "窗口 [{lo}, {hi})",
    },
    "swa_vs_kda.fig.rows": {
        "en": "{n} cached rows",
        "zh": "{n} 个缓存行",
    },
    "swa_vs_kda.fig.recompute": {
        "en": "recompute {n}",
        "zh": "重算 {n}",
    },
    "swa_vs_kda.fig.ckpt_used": {
        "en": "checkpoint restored",
        "zh": "被恢复的 checkpoint",
    },
    "swa_vs_kda.fig.ckpt_earlier": {
        "en": "earlier checkpoints",
        "zh": "更早的 checkpoint",
    },
    "swa_vs_kda.fig.ckpt_later": {
        "en": "later checkpoints (unusable)",
        "zh": "更晚的 checkpoint（不可用）",
    },
    "swa_vs_kda.fig.ckpt_hover": {
        "en": "checkpoint after %{x} tokens",
        "zh": "%{x} 个 token 之后的 checkpoint",
    },
    "swa_vs_kda.fig.position": {
        "en": "position (tokens of A)",
        "zh": "位置（A 的 token）",
    },
    "swa_vs_kda.fig.sweep_title": {
        "en": "Tokens to recompute before resuming at each position",
        "zh": "在每个位置继续之前需要重算的 token 数",
    },
    "swa_vs_kda.fig.sweep_y": {
        "en": "tokens recomputed",
        "zh": "重算的 token 数",
    },
    "swa_vs_kda.watch": {
        "en": "- **Move t.** The SWA window slides with t and is always available wherever the rows are "
              "cached; the KDA lane restores only at the diamonds and recomputes the orange span in between.\n"
              "- **The sawtooth.** Below, KDA's recompute climbs by one per token after each checkpoint and drops "
              "to zero only on one. Denser checkpoints flatten it and cost a state each; SWA needs no extra "
              "memory for any position.\n"
              "- **Later checkpoints.** A grey diamond after t holds more information about A than the state at "
              "t, yet it cannot produce it.\n"
              "- **Freeing memory.** SWA can free rows older than a window one by one (SGLang leaves "
              "tombstones, vLLM null blocks) and still hit wherever a W-token run survives. A KDA state cannot "
              "be trimmed: it is kept or dropped whole.\n"
              "- **SGLang extra_buffer.** Its tracked states sit at chunk-aligned positions counted from each "
              "prefill step's start, and after A finished the tree keeps A's KV only up to the state it "
              "donated: that is why the SWA rows stop there too under this policy.",
        "zh": "- **移动 t。** SWA 窗口随 t 滑动，只要行被缓存就总能得到；KDA 只能在菱形处恢复，中间的橙色区间需要重算。\n"
              "- **锯齿。** 下图中，KDA 的重算量在每个 checkpoint 之后每个 token 加一，只有正好落在 checkpoint 上才降到零。"
              "更密的 checkpoint 让它更平，但每个都要占一个状态；SWA 在任何位置都不需要额外内存。\n"
              "- **更晚的 checkpoint。** t 之后的灰色菱形关于 A 的信息比 t 处的状态还多，却无法得到 t 处的状态。\n"
              "- **释放内存。** SWA 可以逐个释放窗口之外更早的行（SGLang 留下墓碑节点，vLLM 留下空块），只要还剩连续 W 个 "
              "token 的行就能命中。KDA 状态无法裁剪：要么整个保留，要么整个丢弃。\n"
              "- **SGLang extra_buffer。** 它的跟踪状态位于从每个 prefill 步起点算起的 chunk 对齐位置；A 结束后，树只把 A "
              "的 KV 保留到它捐献的状态处：所以在这个策略下 SWA 的行也止于那里。",
    },
}
