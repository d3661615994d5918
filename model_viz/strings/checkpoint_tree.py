"""UI strings of the page ``app_pages/checkpoint_tree.py`` (namespace ``checkpoint_tree.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "checkpoint_tree.nav": {
        "en": "Checkpoint placement",
        "zh": "checkpoint 的放置",
    },
    "checkpoint_tree.caption": {
        "en": "The KDA-aware radix tree growing request by request: where checkpoints are kept, tombstones, "
              "branch points, copy-on-write / snapshot / donate / evict, under five policies (sglang, "
              "sglang_no_buffer, chunk, every_n, branch).",
        "zh": "感知 KDA 的 Radix 树逐个请求地生长：checkpoint 保存在哪里、墓碑节点、分叉点、写时复制 / 快照 / "
              "捐赠 / 驱逐，五种策略对比（sglang、sglang_no_buffer、chunk、every_n、branch）。",
    },
    "checkpoint_tree.title": {
        "en": "Checkpoint placement",
        "zh": "checkpoint 的放置",
    },
    "checkpoint_tree.intro": {
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
    "checkpoint_tree.policy_label": {
        "en": "checkpoint policy (LLM(checkpoint_policy=...))",
        "zh": "checkpoint 策略（LLM(checkpoint_policy=...)）",
    },
    "checkpoint_tree.policy.sglang": {
        "en": "sglang: SGLang's tracking (extra_buffer)",
        "zh": "sglang：SGLang 的状态跟踪（extra_buffer）",
    },
    "checkpoint_tree.policy.sglang_no_buffer": {
        "en": "sglang_no_buffer: SGLang's no_buffer",
        "zh": "sglang_no_buffer：SGLang 的 no_buffer",
    },
    "checkpoint_tree.policy.chunk": {
        "en": "chunk: dense baseline, every chunk boundary",
        "zh": "chunk：稠密基线，每个 chunk 边界",
    },
    "checkpoint_tree.policy.every_n": {
        "en": "every_n: every {I} tokens",
        "zh": "every_n：每 {I} 个 token",
    },
    "checkpoint_tree.policy.branch": {
        "en": "branch: branch points only",
        "zh": "branch：只在分叉点",
    },
    "checkpoint_tree.policy_help.sglang": {
        "en": ("What SGLang's radix cache keeps (extra_buffer): per prefill step **one** state, at the last multiple "
               "of {C} tokens counted from where the step started (or the branching point its match reported, if "
               "that falls in the step); a copy enters the tree while the prompt is unfinished. During decode a "
               "state every {T} tokens (SGLang's `--mamba-track-interval`, 256 by default). Each request holds two "
               "ping-pong track slots; at finish the last tracked state is donated, not the final one."),
        "zh": ("SGLang 基数树缓存保存的内容（extra_buffer）：每个 prefill 步只保存**一个**状态，位置是从该步起点"
               "算起的最后一个 {C} 的倍数（若匹配报告的分叉点落在这一步内，则改存分叉点）；提示词未处理完时，一份拷贝"
               "进入树。decode 时每 {T} 个 token 保存一个状态（SGLang 的 `--mamba-track-interval`，默认 256）。每个"
               "请求持有两个乒乓跟踪槽；结束时捐出的是最后一次跟踪的状态，而不是最终状态。"),
    },
    "checkpoint_tree.policy_help.sglang_no_buffer": {
        "en": ("SGLang's other strategy, `no_buffer` (what `auto` resolved to in the SGLang version read): after "
               "every prefill step that leaves the prompt unfinished, a copy of the working state at wherever the "
               "step ended (`cache_unfinished_req`, page size 1); at finish, the end state itself is donated "
               "(`cache_finished_req`). No tracking inside a step and none during decode."),
        "zh": ("SGLang 的另一种策略 `no_buffer`（在所读的 SGLang 版本中 `auto` 解析为它）：每个让提示词仍未处理完"
               "的 prefill 步之后，在该步结束的位置复制一份工作状态（`cache_unfinished_req`，页大小为 1）；结束时"
               "直接捐出最终状态（`cache_finished_req`）。步内不跟踪，decode 期间也不跟踪。"),
    },
    "checkpoint_tree.policy_help.chunk": {
        "en": ("The dense baseline (not what SGLang does): keep a state at every chunk boundary ({C} tokens) a "
               "prefill passes, plus each finished request's end."),
        "zh": "稠密基线（并非 SGLang 的做法）：在 prefill 经过的每个 chunk 边界（{C} 个 token）保存状态，外加每个已完成请求的末尾。",
    },
    "checkpoint_tree.policy_help.every_n": {
        "en": "Keep a state every {I} tokens (a multiple of the chunk), plus each finished request's end.",
        "zh": "每 {I} 个 token（chunk 的整数倍）保存一个状态，外加每个已完成请求的末尾。",
    },
    "checkpoint_tree.policy_help.branch": {
        "en": ("Keep only the ends of finished requests and the branching point a match reports (the last chunk "
               "boundary inside a KV hit without a state), Marconi-style."),
        "zh": "只保存已完成请求的末尾，以及匹配时报告的分叉点（KV 命中范围内最后一个没有状态的 chunk 边界），"
              "即 Marconi 风格。",
    },
    "checkpoint_tree.upload_label": {
        "en": "…or upload a checkpoint-tree trace (JSONL from model_viz.scenarios.checkpoint_tree.record)",
        "zh": "……或上传一个 checkpoint 树的 trace（由 model_viz.scenarios.checkpoint_tree.record 生成的 JSONL）",
    },
    "checkpoint_tree.source_canned": {
        "en": "Showing the canned scenario under policy `{policy}`, recorded just now by the engine ({events} events).",
        "zh": "当前显示策略 `{policy}` 下的内置场景，刚刚由引擎录制（{events} 个事件）。",
    },
    "checkpoint_tree.err.no_tree": {
        "en": ("The uploaded trace has no tree snapshots (no `tree_steps` in its header): this page needs a trace "
               "written by model_viz.scenarios.checkpoint_tree.record. Showing the canned scenario instead."),
        "zh": ("上传的 trace 没有树快照（头部没有 `tree_steps`）：本页需要由 model_viz.scenarios.checkpoint_tree.record "
               "写出的 trace。改为显示内置场景。"),
    },
    "checkpoint_tree.err.bad_tree": {
        "en": "The uploaded trace's tree snapshots cannot be read: {msg}. Showing the canned scenario instead.",
        "zh": "无法读取上传 trace 中的树快照：{msg}。改为显示内置场景。",
    },
    "checkpoint_tree.step_label": {
        "en": "after request",
        "zh": "请求之后",
    },
    "checkpoint_tree.current": {
        "en": ("**After {r}** ({i} of {n}; {plen} prompt tokens): it restored **{reused}** tokens from a checkpoint "
               "and computed {computed}. {desc}"),
        "zh": "**{r} 之后**（第 {i}/{n} 个；提示词 {plen} 个 token）：从 checkpoint 恢复了 **{reused}** 个 token，"
              "计算了 {computed} 个。{desc}",
    },
    "checkpoint_tree.req.r0": {
        "en": "The first request: nothing to match; the tree gets its KV and the states the policy keeps.",
        "zh": "第一个请求：没有可匹配的内容；树得到它的 KV，以及策略保留的状态。",
    },
    "checkpoint_tree.req.r1": {
        "en": "Same system prompt, another question: the tree forks after the shared tokens (a branch point).",
        "zh": "相同的系统提示词，另一个问题：树在共享 token 之后分叉（一个分叉点）。",
    },
    "checkpoint_tree.req.r2": {
        "en": "The next turn of r0: its prompt is r0's prompt and answer, so r0's donated end state is an exact hit.",
        "zh": "r0 的下一轮：它的提示词就是 r0 的提示词加回答，因此 r0 捐赠的末尾状态是精确命中。",
    },
    "checkpoint_tree.req.r3": {
        "en": "Diverges inside the system prompt: a split creates a node without a state, and memory gets tight.",
        "zh": "在系统提示词内部就分叉：切分产生了一个没有状态的节点，内存也开始吃紧。",
    },
    "checkpoint_tree.req.r4": {
        "en": "A follow-up of r1's question: how much of r1's path still has a state depends on the policy.",
        "zh": "r1 问题的后续：r1 路径上还有多少状态，取决于策略。",
    },
    "checkpoint_tree.metric.states": {
        "en": "checkpoints in the tree",
        "zh": "树中的 checkpoint",
    },
    "checkpoint_tree.metric.kv": {
        "en": "KV tokens in the tree",
        "zh": "树中的 KV token",
    },
    "checkpoint_tree.metric.bytes": {
        "en": "checkpoint memory",
        "zh": "checkpoint 内存",
    },
    "checkpoint_tree.metric.reused": {
        "en": "restored by this request",
        "zh": "本请求恢复的 token",
    },
    "checkpoint_tree.events_title": {
        "en": "Cache events of this request",
        "zh": "本请求的缓存事件",
    },
    "checkpoint_tree.events_none": {
        "en": "no cache events",
        "zh": "没有缓存事件",
    },
    "checkpoint_tree.ev.track": {
        "en": "step {step}: {r} **tracks** the state after {pos} tokens into its track slot {ckpt}",
        "zh": "第 {step} 步：{r} 把 {pos} 个 token 之后的状态**跟踪**进它的跟踪槽 {ckpt}",
    },
    "checkpoint_tree.ev.match": {
        "en": "`match` {r}: KV hit {kv} tokens, deepest state at {st}, branching point {b}",
        "zh": "`match` {r}：KV 命中 {kv} 个 token，最深的状态在 {st}，分叉点 {b}",
    },
    "checkpoint_tree.ev.backoff": {
        "en": "`backoff` {r}: from the KV hit {frm} back to the state at {pos}",
        "zh": "`backoff` {r}：从 KV 命中的 {frm} 回退到位于 {pos} 的状态",
    },
    "checkpoint_tree.ev.copy_on_write": {
        "en": "`copy_on_write` {r}: checkpoint slot {ckpt} copied into a fresh active slot {active} (resume at {pos})",
        "zh": "`copy_on_write` {r}：checkpoint 槽 {ckpt} 复制到新的活动槽 {active}（从 {pos} 继续）",
    },
    "checkpoint_tree.ev.checkpoint_create": {
        "en": "`checkpoint_create` {r}: the prefill's chunk-start state at {pos} saved in slot {ckpt}",
        "zh": "`checkpoint_create` {r}：prefill 在 {pos} 处的块起点状态保存到槽 {ckpt}",
    },
    "checkpoint_tree.ev.snapshot": {
        "en": "`snapshot` {r}: a prefill chunk ended at {pos}; the active state was copied into slot {ckpt}",
        "zh": "`snapshot` {r}：一个 prefill chunk 在 {pos} 结束；活动状态复制到槽 {ckpt}",
    },
    "checkpoint_tree.ev.donate": {
        "en": "`donate` {r}: finished; its active slot {ckpt} becomes the checkpoint at {pos} (no copy)",
        "zh": "`donate` {r}：已完成；它的活动槽 {ckpt} 直接成为位于 {pos} 的 checkpoint（不复制）",
    },
    "checkpoint_tree.ev.evict": {
        "en": "`evict`: memory is short — checkpoint slot {ckpt} (boundary {pos}) dropped; an inner node keeps its KV as a tombstone, a leaf goes",
        "zh": "`evict`：内存不足——丢弃 checkpoint 槽 {ckpt}（边界 {pos}）；内部节点保留 KV 成为墓碑，叶子节点被删除",
    },
    "checkpoint_tree.ev.tombstone": {
        "en": "`tombstone`: a state dropped ({why})",
        "zh": "`tombstone`：丢弃一个状态（{why}）",
    },
    "checkpoint_tree.leg.kv": {
        "en": "KV span (edge)",
        "zh": "KV 片段（边）",
    },
    "checkpoint_tree.leg.path": {
        "en": "path of {r}",
        "zh": "{r} 的路径",
    },
    "checkpoint_tree.leg.branch": {
        "en": "branch point",
        "zh": "分叉点",
    },
    "checkpoint_tree.leg.checkpoint": {
        "en": "checkpoint (KV + state)",
        "zh": "checkpoint（KV + 状态）",
    },
    "checkpoint_tree.leg.kv_only": {
        "en": "KV only (never had a state)",
        "zh": "只有 KV（从未有过状态）",
    },
    "checkpoint_tree.leg.tombstone": {
        "en": "tombstone (state evicted)",
        "zh": "墓碑（状态已驱逐）",
    },
    "checkpoint_tree.leg.restored": {
        "en": "{r} restored here",
        "zh": "{r} 从这里恢复",
    },
    "checkpoint_tree.new": {
        "en": "new in this step",
        "zh": "本步新增",
    },
    "checkpoint_tree.hover.node": {
        "en": "tokens %{{customdata[0]}}…%{{customdata[1]}} “%{{customdata[2]}}”<br>state slot: %{{customdata[3]}} %{{customdata[4]}}",
        "zh": "token %{{customdata[0]}}…%{{customdata[1]}} “%{{customdata[2]}}”<br>状态槽位：%{{customdata[3]}} %{{customdata[4]}}",
    },
    "checkpoint_tree.tree.title": {
        "en": "Radix tree after {r} ({i}/{n}): {states}, {kv} KV tokens",
        "zh": "{r} 之后的 Radix 树（{i}/{n}）：{states}，{kv} 个 KV token",
    },
    "checkpoint_tree.n_states.one": {"en": "{n} checkpoint", "zh": "{n} 个 checkpoint"},
    "checkpoint_tree.n_states.many": {"en": "{n} checkpoints", "zh": "{n} 个 checkpoint"},
    "checkpoint_tree.axis.boundary": {
        "en": "token boundary (where a node ends)",
        "zh": "token 边界（节点结束的位置）",
    },
    "checkpoint_tree.bar.reused": {
        "en": "restored from a checkpoint",
        "zh": "从 checkpoint 恢复",
    },
    "checkpoint_tree.bar.computed": {
        "en": "computed",
        "zh": "计算",
    },
    "checkpoint_tree.bar.states": {
        "en": "checkpoints after the request",
        "zh": "请求之后的 checkpoint 数",
    },
    "checkpoint_tree.bar.tokens": {
        "en": "prompt tokens",
        "zh": "提示词 token",
    },
    "checkpoint_tree.bar.title": {
        "en": "Per request: {r} restored {reused} prompt tokens and computed {computed}",
        "zh": "逐个请求：{r} 恢复了 {reused} 个提示词 token，计算了 {computed} 个",
    },
    "checkpoint_tree.watch": {
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
}
