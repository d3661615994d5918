"""UI strings of the page ``app_pages/pool_map.py`` (namespace ``pool_map.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "pool_map.nav": {
        "en": "Memory pool map",
        "zh": "内存池分布图",
    },
    "pool_map.caption": {
        "en": "One byte budget shared by KV pages and state slots, step by step, with the owner of every unit and the preemptions.",
        "zh": "KV 页与状态槽位共用一个字节预算：逐步查看每个单元的归属以及发生的抢占。",
    },
    "pool_map.title": {
        "en": "Memory pool map",
        "zh": "内存池分布图",
    },
    "pool_map.released": {
        "en": ("The same pool at {model}'s sizes: one state slot is {state} MiB and one KV page {page} KiB, so a slot "
               "weighs as much as {ratio} pages (here, {tiny_ratio}). The picture is the same, the units are not: the "
               "pool cannot tell the models apart, it only counts their bytes."),
        "zh": ("同一个内存池按 {model} 的规模：一个状态槽位 {state} MiB，一个 KV 页 {page} KiB，所以一个槽位相当于 {ratio} "
               "个页（这里是 {tiny_ratio} 个）。图是一样的，单位不同：内存池分不出模型，它只数字节。"),
    },
    "pool_map.intro": {
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
            "混合模型的缓存内存中有不同种类、不同大小的单元：**KDA 状态槽位**（每个正在运行的请求一个，tiny "
            "模型中每个 {state_kib} KiB：3 个 KDA 层的递推状态和卷积窗口）和 **MLA KV 页**（每页 {page_kib} "
            "KiB：{page_size} 个 token 的潜在行）。这里二者从**同一个**字节预算中分配，因此它们之间的划分"
            "随负载变化。\n\n"
            "内置场景：{n} 个请求（提示词长度分别为 {lens} 个 token，每个生成 {gen} 个 token），内存池恰好"
            "能放下 {slots} 个状态和你选择的若干 KV 页。第四个请求要等待状态槽位；当正在运行的请求增长超过预算时，"
            "最年轻的那个会被**抢占**：它的状态槽位和页被释放，之后从第 0 个 token 重新开始。"
        ),
    },
    "pool_map.pages_label": {
        "en": "budget: {slots} state slots + this many KV pages",
        "zh": "预算：{slots} 个状态槽位 + 这么多 KV 页",
    },
    "pool_map.summary": {
        "en": ("**Step {step}** (of steps {first}-{last}): {used} of {budget} KiB used — states {states} KiB, KV pages "
               "{kv} KiB. Preemptions in the whole run: {pre}."),
        "zh": ("**第 {step} 步**（第 {first}-{last} 步中）：已用 {budget} KiB 中的 {used} KiB——状态 {states} KiB，"
               "KV 页 {kv} KiB。整次运行中的抢占次数：{pre}。"),
    },
    "pool_map.events_title": {
        "en": "Memory events of this step",
        "zh": "本步的内存事件",
    },
    "pool_map.events_none": {
        "en": "no allocation or free in this step",
        "zh": "本步没有分配或释放",
    },
    "pool_map.ev.preempt": {
        "en": "⚠ **r{req} preempted**: freed {slots} state slot(s) and {pages} KV page(s); back to the queue, to recompute from token 0",
        "zh": "⚠ **r{req} 被抢占**：释放了 {slots} 个状态槽位和 {pages} 个 KV 页；回到队列，之后从第 0 个 token 重新计算",
    },
    "pool_map.ev.slot_alloc": {
        "en": "state slot {slots} allocated to {reqs}",
        "zh": "状态槽位 {slots} 分配给 {reqs}",
    },
    "pool_map.ev.slot_free": {
        "en": "state slot {slots} freed by {reqs}",
        "zh": "{reqs} 释放了状态槽位 {slots}",
    },
    "pool_map.ev.page_alloc": {
        "en": "KV page(s) {pages} allocated to {req}",
        "zh": "KV 页 {pages} 分配给 {req}",
    },
    "pool_map.ev.page_free": {
        "en": "KV page(s) {pages} freed by {req}",
        "zh": "{req} 释放了 KV 页 {pages}",
    },
    "pool_map.ev.refused": {
        "en": "r{req} **refused**: it needs {need} KiB at its peak; the budget is {budget} KiB ({free} KiB free with nothing else running): finished with an error",
        "zh": "r{req} **被拒绝**：它的峰值需要 {need} KiB，预算为 {budget} KiB（没有其他请求运行时空闲 {free} KiB）：以错误结束",
    },
    "pool_map.ev.stall": {
        "en": "{reqs} **stalled**: no progress for {n} steps, finished with an error",
        "zh": "{reqs} **停滞**：{n} 步没有进展，以错误结束",
    },
    "pool_map.ev.finished": {
        "en": "r{req} finished (its slot and pages are freed after this step's snapshot)",
        "zh": "r{req} 完成（它的状态槽位和页在本步快照之后释放）",
    },
    "pool_map.kind.kda_state": {
        "en": "KDA state slots",
        "zh": "KDA 状态槽位",
    },
    "pool_map.kind.checkpoint": {
        "en": "checkpoint slots",
        "zh": "checkpoint 槽",
    },
    "pool_map.kind.mla_kv": {
        "en": "MLA KV pages",
        "zh": "MLA KV 页",
    },
    "pool_map.kind.short.kda_state": {
        "en": "slot",
        "zh": "槽",
    },
    "pool_map.kind.short.checkpoint": {
        "en": "ckpt",
        "zh": "ckpt",
    },
    "pool_map.kind.short.mla_kv": {
        "en": "page",
        "zh": "页",
    },
    "pool_map.fig.area.title": {
        "en": "Pool use by page kind at the end of every step; step {step} highlighted",
        "zh": "每步结束时按页面种类统计的内存池使用量；高亮第 {step} 步",
    },
    "pool_map.fig.budget": {
        "en": "budget {kib} KiB",
        "zh": "预算 {kib} KiB",
    },
    "pool_map.fig.preempted": {
        "en": "r{req} preempted",
        "zh": "r{req} 被抢占",
    },
    "pool_map.fig.step": {
        "en": "engine step",
        "zh": "引擎步骤",
    },
    "pool_map.fig.strip.title": {
        "en": "Step {step}: the budget, unit by unit (states from the left, KV pages from the right, free between)",
        "zh": "第 {step} 步：逐个单元看预算（状态从左边、KV 页从右边，中间是空闲）",
    },
    "pool_map.fig.strip.x": {
        "en": "KiB of the budget",
        "zh": "预算中的 KiB",
    },
    "pool_map.fig.map.title": {
        "en": "Step {step}: who owns which unit (colour = request, grey = free)",
        "zh": "第 {step} 步：每个单元归谁（颜色 = 请求，灰色 = 空闲）",
    },
    "pool_map.fig.map.slots": {
        "en": "KDA state slots",
        "zh": "KDA 状态槽位",
    },
    "pool_map.fig.map.pages": {
        "en": "MLA KV pages",
        "zh": "MLA KV 页",
    },
    "pool_map.strip_note": {
        "en": ("An accounting view: our pool (`kda_ref.memory.UnifiedMemoryPool`) keeps one tensor per kind and "
               "only shares the byte budget; SGLang's `UnifiedKVPool` really places the two sub-pools at the two "
               "ends of one buffer like this."),
        "zh": ("这是一个记账视图：本项目的内存池（`kda_ref.memory.UnifiedMemoryPool`）每种单元各用一个张量，只共享"
               "字节预算；SGLang 的 `UnifiedKVPool` 才真正像这样把两个子池放在同一块缓冲区的两端。"),
    },
    "pool_map.watch": {
        "en": (
            "- **A state is a big, indivisible unit.** One slot is as large as 44 KV pages here. A new "
            "request is admitted only when a whole slot fits, which is why the fourth request waits.\n"
            "- **KV grows page by page.** Every 16 tokens a running request needs one more page. When "
            "none is left, the scheduler preempts the youngest running request "
            "(`Scheduler.preempt`) and gives its pages to the one that needs them.\n"
            "- **Preemption restarts from token 0.** A KDA state cannot be cut back to an earlier token, so "
            "the victim recomputes its prompt and the tokens it had generated when it is readmitted.\n"
            "- **Change the budget.** With 8 or 10 pages nobody is preempted. With 5 the preemption "
            "comes earlier (step 3); with 7 the same request is preempted twice."
        ),
        "zh": (
            "- **状态是一个大而不可分割的单元。** 这里一个状态槽位相当于 44 个 KV 页。只有放得下一整个状态槽位时"
            "才会接纳新请求，所以第四个请求要等待。\n"
            "- **KV 一页一页地增长。** 正在运行的请求每 16 个 token 需要再多一页。没有空页时，调度器会抢占"
            "最年轻的正在运行的请求（`Scheduler.preempt`），把它的页交给需要的请求。\n"
            "- **抢占从第 0 个 token 重新开始。** KDA 状态无法退回到更早的 token，所以被抢占的请求在重新被"
            "接纳时要重新计算它的提示词和已经生成的 token。\n"
            "- **改变预算。** 有 8 或 10 页时没有请求被抢占。只有 5 页时抢占来得更早（第 3 步）；7 页时同一个"
            "请求被抢占了两次。"
        ),
    },
    "pool_map.demand.title": {
        "en": "What one request holds at its peak",
        "zh": "一个请求在峰值时占用多少",
    },
    "pool_map.demand.intro": {
        "en": ("A request is queued only if the pool could hold it **alone** at its peak: its active state "
               "slot, the slots a rollback strategy keeps for speculation, the checkpoints a prefix cache pins "
               "for it while it runs, and the KV pages of its prompt and output. Here: the longest request of "
               "the run above ({tokens} tokens) under other settings, counted by the engine itself "
               "(`Scheduler.demand`), against this budget. A bar past the dashed line is refused where it "
               "enters, with the numbers below, instead of waiting forever for memory that can never be "
               "free: the engine's progress guarantee (`docs/architecture.md`, Progress)."),
        "zh": ("只有当内存池能够**单独**容纳一个请求的峰值占用时，它才会被排队：它的活动状态槽位、回滚策略为投机"
               "解码保留的槽位、前缀缓存在它运行期间为它钉住的 checkpoint，以及它的提示词和输出的 KV 页。这里是"
               "上面运行中最长的请求（{tokens} 个 token）在其他设置下的峰值，由引擎自己计算"
               "（`Scheduler.demand`），与当前预算对比。越过虚线的条会在进入时被拒绝，并给出下面的数字，"
               "而不是永远等待一块永远不会空出来的内存：这是引擎的进展保证（`docs/architecture.md` 的 Progress 一节）。"),
    },
    "pool_map.demand.plain": {"en": "no prefix cache", "zh": "无前缀缓存"},
    "pool_map.demand.radix": {"en": "radix cache (chunk)", "zh": "radix 缓存（chunk）"},
    "pool_map.demand.sglang": {"en": "radix cache (sglang tracking)", "zh": "radix 缓存（sglang 跟踪）"},
    "pool_map.demand.block": {"en": "block cache (retention 0)", "zh": "block 缓存（retention 0）"},
    "pool_map.demand.slots": {"en": "speculation, 1 + k slots (k = 3)", "zh": "投机解码，1 + k 个槽位（k = 3）"},
    "pool_map.demand.refused": {"en": " refused", "zh": " 被拒绝"},
    "pool_map.demand.budget": {"en": "budget {kib} KiB", "zh": "预算 {kib} KiB"},
    "pool_map.demand.x": {"en": "KiB at the request's peak", "zh": "请求峰值占用（KiB）"},
    "pool_map.demand.refused_by": {"en": "the engine refuses it:", "zh": "引擎拒绝（以下为引擎的英文原文）："},
    "pool_map.demand.pick": {"en": "settings shown", "zh": "显示的设置"},
    "pool_map.demand.hidden": {
        "en": "Not shown: {names}. The engine refuses them at this budget; pick them above to see its reasons.",
        "zh": "未显示：{names}。在这个预算下引擎会拒绝它们；在上面选中它们即可看到引擎给出的原因。",
    },
}
