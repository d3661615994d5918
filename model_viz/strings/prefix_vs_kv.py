"""UI strings of the page ``app_pages/prefix_vs_kv.py`` (namespace ``prefix_vs_kv.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "prefix_vs_kv.nav": {
        "en": "Prefix cache ≠ KV cache",
        "zh": "前缀缓存 ≠ KV 缓存",
    },
    "prefix_vs_kv.caption": {
        "en": "For every shared-prefix length: the KV is always reusable, the KDA state only where a checkpoint "
              "was saved — measured on the engine's radix tree.",
        "zh": "对每一个共享前缀长度：KV 总能复用，KDA 状态只有在保存过 checkpoint 的位置才能复用——在引擎的 "
              "Radix 树上实测。",
    },
    "prefix_vs_kv.title": {
        "en": "A prefix cache is not a KV cache",
        "zh": "前缀缓存不是 KV 缓存",
    },
    "prefix_vs_kv.intro": {
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
    "prefix_vs_kv.step_label": {
        "en": "shared prefix length L",
        "zh": "共享前缀长度 L",
    },
    "prefix_vs_kv.current": {
        "en": ("**L = {L}** shared tokens. **MLA KV:** the KV of this prefix is rows 0…{L1} of the cached KV — "
               "reuse all {L}. **KDA state:** the deepest checkpoint ≤ {L} is at **{c}** — restore it and "
               "recompute **{n}** token(s) before the request's own tokens."),
        "zh": ("共享 **L = {L}** 个 token。**MLA KV**：这个前缀的 KV 就是缓存 KV 的第 0…{L1} 行——全部 {L} 个都"
               "可复用。**KDA 状态**：≤ {L} 的最深 checkpoint 在 **{c}**——恢复它，并在请求自己的 token 之前"
               "重算 **{n}** 个 token。"),
    },
    "prefix_vs_kv.verified": {
        "en": ("**Verified on the engine:** a second request sharing L = {L} tokens (+{tail} of its own) "
               "restored **{reused}** tokens from the cache (trace: `copy_on_write` at {reused}), recomputed "
               "{n}, and its output equals a run without prefix cache: same tokens, max |Δlogit| = {d}."),
        "zh": ("**已在引擎上验证**：一个共享 L = {L} 个 token（另有 {tail} 个自己的 token）的第二个请求从缓存"
               "恢复了 **{reused}** 个 token（trace：`copy_on_write` 位于 {reused}），重算 {n} 个，输出与不用"
               "前缀缓存的运行完全一致：token 相同，最大 |Δlogit| = {d}。"),
    },
    "prefix_vs_kv.not_verified": {
        "en": ("The back-off for this L comes from the tree's own `match_prefix`. Real second requests were run "
               "(and checked identical to a run without cache) at L = {ls}: step to one of them."),
        "zh": ("这个 L 的回退结果来自 Radix 树自己的 `match_prefix`。真实的第二个请求在 L = {ls} 处运行过"
               "（并检查了与不用缓存的运行完全一致）：可以跳到其中之一查看。"),
    },
    "prefix_vs_kv.metric.kv": {
        "en": "KV reusable",
        "zh": "可复用的 KV",
    },
    "prefix_vs_kv.metric.state": {
        "en": "state restorable at",
        "zh": "状态可恢复于",
    },
    "prefix_vs_kv.metric.recompute": {
        "en": "tokens to recompute",
        "zh": "需重算的 token",
    },
    "prefix_vs_kv.memory": {
        "en": ("Cost of what is cached: the KV of all {T} tokens is {kv_kib:.1f} KiB; the {n_states} states are "
               "{states_kib:,.0f} KiB ({state_kib:,.0f} KiB each). A state at *every* position, which would make "
               "the state side as flexible as the KV, would take {dense_kib:,.0f} KiB."),
        "zh": ("缓存内容的代价：全部 {T} 个 token 的 KV 为 {kv_kib:.1f} KiB；{n_states} 个状态共 {states_kib:,.0f} KiB"
               "（每个 {state_kib:,.0f} KiB）。若在*每个*位置都保存状态，让状态一侧像 KV 一样灵活，需要 "
               "{dense_kib:,.0f} KiB。"),
    },
    "prefix_vs_kv.row.kv": {
        "en": "MLA KV",
        "zh": "MLA KV",
    },
    "prefix_vs_kv.row.state": {
        "en": "KDA state",
        "zh": "KDA 状态",
    },
    "prefix_vs_kv.leg.kv_reuse": {
        "en": "KV reused (per token)",
        "zh": "复用的 KV（按 token）",
    },
    "prefix_vs_kv.leg.unused": {
        "en": "cached, beyond the shared prefix",
        "zh": "已缓存，但在共享前缀之外",
    },
    "prefix_vs_kv.leg.restore": {
        "en": "covered by the restored checkpoint",
        "zh": "由恢复的 checkpoint 覆盖",
    },
    "prefix_vs_kv.leg.recompute": {
        "en": "recomputed from the checkpoint",
        "zh": "从 checkpoint 开始重算",
    },
    "prefix_vs_kv.leg.checkpoint": {
        "en": "saved state (checkpoint)",
        "zh": "保存的状态（checkpoint）",
    },
    "prefix_vs_kv.hover.kv": {
        "en": "KV rows 0…{L1}: reused as they are",
        "zh": "KV 第 0…{L1} 行：原样复用",
    },
    "prefix_vs_kv.hover.unused": {
        "en": "tokens {L}…{T}: in the cache, not shared by this request",
        "zh": "token {L}…{T}：在缓存中，但此请求不共享",
    },
    "prefix_vs_kv.hover.restore": {
        "en": "the state after token {c}, copied into a fresh slot",
        "zh": "第 {c} 个 token 之后的状态，复制到新的槽位",
    },
    "prefix_vs_kv.hover.recompute": {
        "en": "tokens {c}…{L}: {n} recomputed (their KV is cached, their state is not)",
        "zh": "token {c}…{L}：重算 {n} 个（它们的 KV 已缓存，状态没有）",
    },
    "prefix_vs_kv.hover.checkpoint": {
        "en": "state after token %{{x}} — %{{text}}",
        "zh": "第 %{{x}} 个 token 之后的状态——%{{text}}",
    },
    "prefix_vs_kv.hover.verified": {
        "en": "L = %{{x}}: engine restored %{{y}}, recomputed %{{customdata[0]}}, max |Δlogit| %{{customdata[1]}}",
        "zh": "L = %{{x}}：引擎恢复 %{{y}}，重算 %{{customdata[0]}}，最大 |Δlogit| %{{customdata[1]}}",
    },
    "prefix_vs_kv.op.checkpoint_create": {
        "en": "chunk-start state of the prefill",
        "zh": "prefill 的块起点状态",
    },
    "prefix_vs_kv.op.snapshot": {
        "en": "snapshot at the end of a prefill chunk",
        "zh": "prefill chunk 结束时的快照",
    },
    "prefix_vs_kv.op.donate": {
        "en": "donated by the finished request",
        "zh": "已完成请求捐赠",
    },
    "prefix_vs_kv.strip.title": {
        "en": "A request sharing L = {L} tokens: KV reuses {L}, the state resumes at {c} and recomputes {n}",
        "zh": "共享 L = {L} 个 token 的请求：KV 复用 {L}，状态从 {c} 继续并重算 {n} 个",
    },
    "prefix_vs_kv.stair.title": {
        "en": "Reusable prefix for every L: KV is the diagonal, the state a staircase (L = {L} → {c})",
        "zh": "每个 L 的可复用前缀：KV 是对角线，状态是阶梯（L = {L} → {c}）",
    },
    "prefix_vs_kv.stair.kv": {
        "en": "MLA KV: L",
        "zh": "MLA KV：L",
    },
    "prefix_vs_kv.stair.state": {
        "en": "KDA state: deepest checkpoint ≤ L",
        "zh": "KDA 状态：≤ L 的最深 checkpoint",
    },
    "prefix_vs_kv.stair.verified": {
        "en": "real second request (engine)",
        "zh": "真实的第二个请求（引擎）",
    },
    "prefix_vs_kv.stair.current": {
        "en": "current L",
        "zh": "当前 L",
    },
    "prefix_vs_kv.axis.position": {
        "en": "token position",
        "zh": "token 位置",
    },
    "prefix_vs_kv.axis.shared": {
        "en": "shared prefix length L",
        "zh": "共享前缀长度 L",
    },
    "prefix_vs_kv.axis.reusable": {
        "en": "tokens reusable without recompute",
        "zh": "无需重算即可复用的 token",
    },
    "prefix_vs_kv.watch": {
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
}
