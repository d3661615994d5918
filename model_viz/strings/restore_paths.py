"""UI strings of the page ``app_pages/restore_paths.py`` (namespace ``restore_paths.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "restore_paths.nav": {
        "en": "Restore paths",
        "zh": "恢复路径",
    },
    "restore_paths.caption": {
        "en": "Match → back-off → boundary check → copy-on-write restore → recompute, step by step; and what "
              "happens when a checkpoint from the wrong boundary is restored.",
        "zh": "匹配 → 回退 → 边界检查 → 写时复制恢复 → 重算，逐步展示；以及恢复了错误边界的 checkpoint 会发生什么。",
    },
    "restore_paths.title": {
        "en": "Restore paths",
        "zh": "恢复路径",
    },
    "restore_paths.intro": {
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
    "restore_paths.request_label": {
        "en": "request B",
        "zh": "请求 B",
    },
    "restore_paths.req.mid": {
        "en": "shares 57 tokens of A's prompt (diverges mid-chunk)",
        "zh": "共享 A 提示词的 57 个 token（在 chunk 中间分叉）",
    },
    "restore_paths.req.turn": {
        "en": "the next turn: A's prompt + A's answer + a question",
        "zh": "下一轮：A 的提示词 + A 的回答 + 一个问题",
    },
    "restore_paths.req.short": {
        "en": "shares only 21 tokens",
        "zh": "只共享 21 个 token",
    },
    "restore_paths.break_label": {
        "en": "break it: restore from the wrong boundary",
        "zh": "破坏它：从错误的边界恢复",
    },
    "restore_paths.mode_label": {
        "en": "what goes wrong",
        "zh": "错在哪里",
    },
    "restore_paths.mode.boundary": {
        "en": "the whole state of another checkpoint",
        "zh": "另一个 checkpoint 的整个状态",
    },
    "restore_paths.mode.conv": {
        "en": "right recurrent state, conv windows of another boundary",
        "zh": "递推状态正确，卷积窗口来自另一个边界",
    },
    "restore_paths.step_label": {
        "en": "restore step",
        "zh": "恢复步骤",
    },
    "restore_paths.stepname.arrive": {
        "en": "arrive",
        "zh": "到达",
    },
    "restore_paths.stepname.match": {
        "en": "match",
        "zh": "匹配",
    },
    "restore_paths.stepname.backoff": {
        "en": "back-off",
        "zh": "回退",
    },
    "restore_paths.stepname.check": {
        "en": "boundary check",
        "zh": "边界检查",
    },
    "restore_paths.stepname.restore": {
        "en": "copy-on-write",
        "zh": "写时复制",
    },
    "restore_paths.stepname.recompute": {
        "en": "recompute",
        "zh": "重算",
    },
    "restore_paths.stepname.compare": {
        "en": "result",
        "zh": "结果",
    },
    "restore_paths.step.arrive": {
        "en": ("Request B has **{N}** prompt tokens. The engine will look up its first **{known}** in the cache: "
               "all but the last, whose logits must be computed to sample the first output token."),
        "zh": "请求 B 有 **{N}** 个提示词 token。引擎会在缓存中查找其中前 **{known}** 个：除最后一个以外的全部，"
              "因为最后一个 token 的 logits 必须计算出来才能采样第一个输出 token。",
    },
    "restore_paths.step.match": {
        "en": ("**Match.** Walking the radix tree along B's tokens finds KV for the first **{kv}** tokens — the "
               "answer of an ordinary prefix cache (trace: `match`, kv_len = {kv})."),
        "zh": "**匹配。** 沿 B 的 token 遍历 Radix 树，找到前 **{kv}** 个 token 的 KV——这就是普通前缀缓存的答案"
              "（trace：`match`，kv_len = {kv}）。",
    },
    "restore_paths.step.backoff": {
        "en": ("**Back-off.** A KDA state exists only at checkpoints, so the usable prefix is the deepest one ≤ "
               "{kv}: **{c}** (trace: `match` state_len = {c}). The KV of tokens {c}…{kv} stays in the tree but "
               "cannot be used without recomputing them from the state at {c}."),
        "zh": "**回退。** KDA 状态只存在于 checkpoint 处，所以可用前缀是 ≤ {kv} 的最深 checkpoint：**{c}**"
              "（trace：`match` state_len = {c}）。token {c}…{kv} 的 KV 仍留在树中，但不从 {c} 处的状态重算就无法使用。",
    },
    "restore_paths.step.check_ok": {
        "en": ("**Boundary check.** Before restoring, `RadixPrefixCache.check_boundary` compares the checkpoint's "
               "record — taken when it was saved — with what is being reused: the state after exactly **{c}** "
               "tokens, the conv windows of the same {c} tokens, and {c} KV units. **They agree.**"),
        "zh": "**边界检查。** 恢复之前，`RadixPrefixCache.check_boundary` 把 checkpoint 保存时记录的边界与将要复用"
              "的内容比较：恰好 **{c}** 个 token 之后的状态、同样 {c} 个 token 的卷积窗口，以及 {c} 个 KV 单元。"
              "**一致。**",
    },
    "restore_paths.step.check_bad": {
        "en": ("**Boundary check.** The checkpoint about to be restored describes boundary **{b}**, not {c}. The "
               "engine's check raises `BoundaryMismatchError` (below). **For this demonstration the check is "
               "bypassed** on this one engine instance and the restore goes ahead."),
        "zh": "**边界检查。** 将要恢复的 checkpoint 描述的是边界 **{b}**，而不是 {c}。引擎的检查抛出 "
              "`BoundaryMismatchError`（见下方）。**为了演示，本页在这一个引擎实例上绕过了检查**，恢复照常进行。",
    },
    "restore_paths.step.restore": {
        "en": ("**Copy-on-write.** The checkpoint (slot {ck}) is *copied* into a fresh active slot **{a}**; B "
               "writes only its own slot from now on, so the cached state stays valid for the next hit "
               "(trace: `copy_on_write`). B's block table starts with the tree's {c} KV units."),
        "zh": "**写时复制。** checkpoint（槽 {ck}）被*复制*到一个新的活动槽 **{a}**；此后 B 只写自己的槽，缓存的"
              "状态对下一次命中依然有效（trace：`copy_on_write`）。B 的块表以树中的 {c} 个 KV 单元开头。",
    },
    "restore_paths.step.restore_bad_boundary": {
        "en": ("**Copy-on-write — of the wrong state.** Slot {ck} holds the state after {b} tokens, and it is "
               "copied into the active slot {a} as if it were the state after {c}. The recurrent states differ "
               "by {sd} (relative), the conv windows by {cd}."),
        "zh": "**写时复制——但复制的是错误的状态。** 槽 {ck} 保存的是 {b} 个 token 之后的状态，却被当作 {c} 个 token"
              " 之后的状态复制到活动槽 {a}。递推状态相差 {sd}（相对值），卷积窗口相差 {cd}。",
    },
    "restore_paths.step.restore_bad_conv": {
        "en": ("**Copy-on-write — of a mixed state.** Slot {ck} has the right recurrent state (difference {sd}) "
               "but the conv windows of boundary {b} (difference {cd}): the last inputs the short convolution "
               "sees are not B's."),
        "zh": "**写时复制——但复制的是混合状态。** 槽 {ck} 的递推状态正确（差值 {sd}），但卷积窗口来自边界 {b}"
              "（差值 {cd}）：短卷积看到的最近输入不是 B 的。",
    },
    "restore_paths.step.recompute": {
        "en": ("**Recompute.** The prefill starts at {c} and runs the **{n}** remaining prompt tokens (chunks as "
               "start+tokens: {chunks}) — the {kv_minus_c} shared tokens after the checkpoint and B's own ones — "
               "writing their KV after the reused units."),
        "zh": "**重算。** prefill 从 {c} 开始，运行剩下的 **{n}** 个提示词 token（chunk 以 起点+token 数 表示："
              "{chunks}）——checkpoint 之后的 {kv_minus_c} 个共享 token 以及 B 自己的 token——并把它们的 KV 写在复用的"
              "单元之后。",
    },
    "restore_paths.step.compare": {
        "en": ("**Result.** B generated {G} tokens; **{same} of {G}** equal those of a run without prefix cache, "
               "max |Δlogit| = {dc}: reusing the prefix did not change the answer."),
        "zh": "**结果。** B 生成了 {G} 个 token；其中 **{same}/{G}** 个与不用前缀缓存的运行相同，最大 |Δlogit| = "
              "{dc}：复用前缀没有改变答案。",
    },
    "restore_paths.step.compare_bad": {
        "en": ("**Result.** With the wrong state, **{same} of {G}** tokens match the run without cache and the "
               "logits move by up to **{d}** (a correct restore: {dc}). Nothing crashed — without the boundary "
               "check this would be a silently wrong answer."),
        "zh": "**结果。** 用了错误的状态后，只有 **{same}/{G}** 个 token 与不用缓存的运行相同，logits 最多偏移 "
              "**{d}**（正确恢复时：{dc}）。没有任何崩溃——如果没有边界检查，这就是一个悄无声息的错误答案。",
    },
    "restore_paths.check_raised": {
        "en": "What the engine raises for this restore (`kda_ref.cache.BoundaryMismatchError`):",
        "zh": "引擎对这次恢复抛出的错误（`kda_ref.cache.BoundaryMismatchError`）：",
    },
    "restore_paths.metric.kv": {
        "en": "KV hit",
        "zh": "KV 命中",
    },
    "restore_paths.metric.state": {
        "en": "restored at",
        "zh": "恢复位置",
    },
    "restore_paths.metric.recompute": {
        "en": "recomputed",
        "zh": "重算",
    },
    "restore_paths.row.request": {
        "en": "request B",
        "zh": "请求 B",
    },
    "restore_paths.row.kv": {
        "en": "MLA KV in the tree",
        "zh": "树中的 MLA KV",
    },
    "restore_paths.row.ckpt": {
        "en": "checkpoints",
        "zh": "checkpoint",
    },
    "restore_paths.row.active": {
        "en": "B's active state",
        "zh": "B 的活动状态",
    },
    "restore_paths.leg.prompt": {
        "en": "prompt",
        "zh": "提示词",
    },
    "restore_paths.leg.gen": {
        "en": "generated",
        "zh": "生成",
    },
    "restore_paths.leg.kv": {
        "en": "KV hit",
        "zh": "KV 命中",
    },
    "restore_paths.leg.other": {
        "en": "A's KV, not shared",
        "zh": "A 的 KV，不共享",
    },
    "restore_paths.leg.ckpt": {
        "en": "checkpoint",
        "zh": "checkpoint",
    },
    "restore_paths.leg.wrong": {
        "en": "state actually restored",
        "zh": "实际恢复的状态",
    },
    "restore_paths.leg.check_ok": {
        "en": "boundary check passed",
        "zh": "边界检查通过",
    },
    "restore_paths.leg.check_bad": {
        "en": "boundary check failed (bypassed)",
        "zh": "边界检查失败（已绕过）",
    },
    "restore_paths.leg.restored": {
        "en": "restored (copy)",
        "zh": "恢复（复制）",
    },
    "restore_paths.leg.recompute": {
        "en": "recomputed",
        "zh": "重算",
    },
    "restore_paths.leg.tokens": {
        "en": "same token as without cache?",
        "zh": "与不用缓存时 token 相同？",
    },
    "restore_paths.hover.prompt": {
        "en": "B's {N} prompt tokens",
        "zh": "B 的 {N} 个提示词 token",
    },
    "restore_paths.hover.gen": {
        "en": "{G} generated tokens",
        "zh": "{G} 个生成的 token",
    },
    "restore_paths.hover.kv": {
        "en": "KV of {n} tokens found in the tree",
        "zh": "在树中找到 {n} 个 token 的 KV",
    },
    "restore_paths.hover.other": {
        "en": "tokens {a}…{b}: A's, B goes elsewhere",
        "zh": "token {a}…{b}：属于 A，B 走了另一条路",
    },
    "restore_paths.hover.ckpt": {
        "en": "checkpoint: the state after token %{{x}}",
        "zh": "checkpoint：第 %{{x}} 个 token 之后的状态",
    },
    "restore_paths.hover.wrong": {
        "en": "the state that was copied really describes boundary {b}",
        "zh": "被复制的状态实际描述的是边界 {b}",
    },
    "restore_paths.hover.restored": {
        "en": "checkpoint slot {ck} → active slot {a}: the state after {c} tokens",
        "zh": "checkpoint 槽 {ck} → 活动槽 {a}：{c} 个 token 之后的状态",
    },
    "restore_paths.hover.recompute": {
        "en": "tokens {c}…{N}: {n} recomputed",
        "zh": "token {c}…{N}：重算 {n} 个",
    },
    "restore_paths.hover.token": {
        "en": "token %{{customdata[0]}} (without cache: %{{customdata[1]}})",
        "zh": "token %{{customdata[0]}}（不用缓存时：%{{customdata[1]}}）",
    },
    "restore_paths.fig.arrive": {
        "en": "Request B: {N} prompt tokens",
        "zh": "请求 B：{N} 个提示词 token",
    },
    "restore_paths.fig.match": {
        "en": "Match: the KV of {kv} tokens is in the tree",
        "zh": "匹配：树中有 {kv} 个 token 的 KV",
    },
    "restore_paths.fig.backoff": {
        "en": "Back-off: {kv} → the deepest checkpoint {c}",
        "zh": "回退：{kv} → 最深的 checkpoint {c}",
    },
    "restore_paths.fig.check": {
        "en": "Boundary check at {c}",
        "zh": "在 {c} 处做边界检查",
    },
    "restore_paths.fig.restore": {
        "en": "Copy-on-write: slot {ck} → fresh slot {a}",
        "zh": "写时复制：槽 {ck} → 新槽 {a}",
    },
    "restore_paths.fig.recompute": {
        "en": "Recompute {n} tokens from {c}",
        "zh": "从 {c} 开始重算 {n} 个 token",
    },
    "restore_paths.fig.compare": {
        "en": "Result: generated tokens vs a run without cache",
        "zh": "结果：生成的 token 与不用缓存的运行对比",
    },
    "restore_paths.axis.position": {
        "en": "token position",
        "zh": "token 位置",
    },
    "restore_paths.axis.gen": {
        "en": "generated token",
        "zh": "生成的 token",
    },
    "restore_paths.axis.diff": {
        "en": "max |Δlogit| vs no cache",
        "zh": "与不用缓存相比的最大 |Δlogit|",
    },
    "restore_paths.div.correct": {
        "en": "correct restore",
        "zh": "正确恢复",
    },
    "restore_paths.div.broken": {
        "en": "restore from the wrong boundary",
        "zh": "从错误边界恢复",
    },
    "restore_paths.div.tol": {
        "en": "same answer below {tol}",
        "zh": "低于 {tol} 即答案相同",
    },
    "restore_paths.div.title_ok": {
        "en": "Logits vs a run without cache: max |Δ| = {d}, {same}/{G} tokens equal",
        "zh": "与不用缓存的运行比较 logits：最大 |Δ| = {d}，{same}/{G} 个 token 相同",
    },
    "restore_paths.div.title_broken": {
        "en": "Broken restore: max |Δlogit| = {d}, {same}/{G} tokens equal",
        "zh": "错误恢复：最大 |Δlogit| = {d}，{same}/{G} 个 token 相同",
    },
    "restore_paths.watch": {
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
}
