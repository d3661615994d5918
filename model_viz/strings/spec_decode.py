"""UI strings of the page ``app_pages/spec_decode.py`` (namespace ``spec_decode.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "spec_decode.nav": {
        "en": "Speculative decoding",
        "zh": "投机解码",
    },
    "spec_decode.caption": {
        "en": "Draft k tokens, verify them in one forward, keep j: a KV cache truncates the rest, a KDA state "
              "cannot. Three ways to roll the state back, and what each costs.",
        "zh": "起草 k 个 token，一次前向验证，保留 j 个：KV 缓存可以截掉其余部分，KDA 状态不行。三种回滚状态的方法，以及"
              "各自的代价。",
    },
    "spec_decode.title": {
        "en": "Speculative decoding: a state cannot be truncated",
        "zh": "投机解码：状态不能截断",
    },
    "spec_decode.intro": {
        "en": "Speculative decoding guesses several tokens (drafts) and lets the model check them all in one "
              "forward. A KV cache rolls a rejected draft back by dropping its rows. A KDA state after the drafts "
              "has already folded them in, and no earlier state can be read back out of it. So the verify never "
              "writes the committed state: it keeps what it needs to continue from any accepted position.\n\n"
              "The trained tiny model continues a repetitive table from the repository's docs ({P} prompt "
              "tokens, {N} generated) with n-gram drafts, once with each strategy, on the real engine. Every "
              "number below is read from the engine's trace and stats, and all three produce plain greedy "
              "decoding's tokens exactly.",
        "zh": "投机解码先猜若干个 token（草稿），再让模型用一次前向把它们全部检查一遍。KV 缓存回滚被拒绝的草稿时只需丢掉对应"
              "的行。而起草之后的 KDA 状态已经把草稿折叠进去了，也无法从中读回任何更早的状态。因此 verify 从不写入已提交的"
              "状态：它保存从任意被接受位置继续所需的东西。\n\n"
              "训练过的小模型用 n-gram 草稿续写仓库文档中的一张重复表格（提示词 {P} 个 token，生成 {N} 个），在真实引擎上"
              "对每种策略各运行一次。下面每个数字都读自引擎的 trace 和统计，三种策略都精确地产生普通贪心解码的 token。",
    },
    "spec_decode.k_label": {
        "en": "draft tokens k",
        "zh": "草稿 token 数 k",
    },
    "spec_decode.step_label": {
        "en": "verify step",
        "zh": "verify 步",
    },
    "spec_decode.summary": {
        "en": "{n} verify steps, **{mean:.2f}** tokens per step on average: the {N} tokens took **{spec}** engine "
              "steps instead of {plain}.",
        "zh": "共 {n} 个 verify 步，平均每步 **{mean:.2f}** 个 token：生成 {N} 个 token 用了 **{spec}** 个引擎步，"
              "而不是 {plain} 个。",
    },
    "spec_decode.step_text": {
        "en": "The target accepted **{a}** of {k} drafts and added its own next token; the request keeps {kept} "
              "verified tokens and continues from the state after verified token {j}. **per_step** copies that "
              "state out of the verify's scratch into the request's slot; **slots** just makes slot {j} the active "
              "one (nothing copied); **replay** folds the first {kept} tokens' inputs into the committed state "
              "(the states after the other tokens were never computed).",
        "zh": "目标模型接受了 {k} 个草稿中的 **{a}** 个，并加上自己的下一个 token；请求保留 {kept} 个已验证 token，从第 "
              "{j} 个已验证 token 之后的状态继续。**per_step** 把这个状态从 verify 的暂存区复制到请求的槽位；**slots** "
              "只是把第 {j} 个槽位设为活动槽位（不复制）；**replay** 把前 {kept} 个 token 的输入折叠进已提交的状态（其余 "
              "token 之后的状态从未被计算）。",
    },
    "spec_decode.lane.per_step": {
        "en": "per_step (SGLang)",
        "zh": "per_step（SGLang）",
    },
    "spec_decode.lane.slots": {
        "en": "slots (vLLM)",
        "zh": "slots（vLLM）",
    },
    "spec_decode.lane.replay": {
        "en": "replay (ReplaySSM)",
        "zh": "replay（ReplaySSM）",
    },
    "spec_decode.lane_note.per_step": {
        "en": "S{t}",
        "zh": "S{t}",
    },
    "spec_decode.lane_note.slots": {
        "en": "slot {t}",
        "zh": "槽 {t}",
    },
    "spec_decode.lane_note.replay": {
        "en": "x{t}",
        "zh": "x{t}",
    },
    "spec_decode.fig.verify_title": {
        "en": "Verify {n}/{N}: after {ctx} tokens, {k} drafts, {a} accepted",
        "zh": "第 {n}/{N} 次 verify：{ctx} 个 token 之后，{k} 个草稿，接受 {a} 个",
    },
    "spec_decode.fig.tokens": {
        "en": "verified tokens",
        "zh": "被验证的 token",
    },
    "spec_decode.fig.committed": {
        "en": "the last committed token",
        "zh": "最后一个已提交的 token",
    },
    "spec_decode.fig.accepted": {
        "en": "draft accepted",
        "zh": "草稿被接受",
    },
    "spec_decode.fig.rejected": {
        "en": "draft rejected",
        "zh": "草稿被拒绝",
    },
    "spec_decode.fig.next": {
        "en": "target adds “{tok}”",
        "zh": "目标模型加上“{tok}”",
    },
    "spec_decode.fig.x": {
        "en": "verified token (0 = last committed, i = draft i)",
        "zh": "被验证的 token（0 = 最后一个已提交的，i = 第 i 个草稿）",
    },
    "spec_decode.fig.bytes_tiny": {
        "en": "rollback storage, this run (peak)",
        "zh": "回滚存储，本次运行（峰值）",
    },
    "spec_decode.fig.bytes_48b": {
        "en": "per request at Kimi-Linear-48B, k = {k}",
        "zh": "Kimi-Linear-48B 每个请求，k = {k}",
    },
    "spec_decode.bytes_text": {
        "en": "**per_step** needs 1 + k states as scratch, but only while a request verifies; **slots** keeps 1 + k "
              "states per request all the time (reserved at admission); **replay** keeps only 1 + k tokens' inputs "
              "(conv input, k, v, g, β: {tok} B per token here against {state} B for one state), paid for by "
              "recomputing the kept tokens after acceptance.",
        "zh": "**per_step** 需要 1 + k 个状态作暂存，但只在请求 verify 时需要；**slots** 每个请求始终保留 1 + k 个状态（在准入"
              "时预留）；**replay** 只保存 1 + k 个 token 的输入（卷积输入、k、v、g、β：这里每个 token {tok} B，而一个状态是 "
              "{state} B），代价是在接受之后重算保留下来的 token。",
    },
    "spec_decode.break_label": {
        "en": "break it: roll back like a KV cache",
        "zh": "弄坏它：像 KV 缓存一样回滚",
    },
    "spec_decode.broken.intro": {
        "en": "This engine instance drops the rejected positions' KV, as a KV cache would, but keeps the KDA state "
              "after *all* drafts, rejected ones included (the commit is bypassed on purpose; nothing in the "
              "engine changes).",
        "zh": "这个引擎实例像 KV 缓存一样丢掉被拒绝位置的 KV，但保留了*所有*草稿之后的 KDA 状态，包括被拒绝的草稿（有意绕过"
              "提交；引擎本身没有任何改动）。",
    },
    "spec_decode.broken.diverged": {
        "en": "After the first rejection, from output token {r} on, every token is computed from a state that has "
              "seen tokens that are not in the text. The logits jump (plot), and the answer leaves the "
              "greedy one at token **{d}**.",
        "zh": "第一次拒绝发生后，从输出的第 {r} 个 token 起，每个 token 都由一个见过不在文本中的 token 的状态计算。logits "
              "突变（见图），回答在第 **{d}** 个 token 处偏离贪心结果。",
    },
    "spec_decode.broken.same": {
        "en": "The first wrong-state token is output token {r}: the logits jump (plot), although this time every "
              "greedy choice happened to survive. The state is wrong all the same.",
        "zh": "第一个由错误状态计算的 token 是输出的第 {r} 个：logits 突变（见图），只是这一次每个贪心选择碰巧都没变。状态"
              "依然是错的。",
    },
    "spec_decode.broken.none": {
        "en": "With this k no draft was rejected, so no wrong state was kept: choose another k.",
        "zh": "在这个 k 下没有草稿被拒绝，因此没有保留错误的状态：换一个 k 试试。",
    },
    "spec_decode.broken.ref": {
        "en": "greedy",
        "zh": "贪心",
    },
    "spec_decode.broken.bad": {
        "en": "KV-style rollback",
        "zh": "KV 式回滚",
    },
    "spec_decode.fig.drift_title": {
        "en": "How far the wrongly rolled-back engine's logits move",
        "zh": "错误回滚的引擎的 logits 偏离了多少",
    },
    "spec_decode.fig.drift_x": {
        "en": "generated token",
        "zh": "生成的 token",
    },
    "spec_decode.fig.wrong_state": {
        "en": "first token from a wrong state",
        "zh": "第一个由错误状态计算的 token",
    },
    "spec_decode.watch": {
        "en": "- **Rejection is free for a KV cache, not for a state.** Step to a verify with red drafts: their KV "
              "rows are simply freed, but their effect on the KDA state has to be undone by choosing an older "
              "state, never by subtracting.\n"
              "- **Three answers to one question.** per_step pays a copy per verify; slots pays 1 + k states per "
              "request, always; replay pays a recomputation of the kept tokens and keeps almost nothing. Compare "
              "the bars at 48B: the state dominates.\n"
              "- **Same tokens.** Every strategy produces plain greedy decoding's tokens (the page checks it); "
              "speculation changes the number of engine steps, never the answer.\n"
              "- **Break it.** Keeping the state after the rejected drafts is what a KV-cache-style rollback "
              "would do to a recurrent layer: the logits jump at the first token computed from it.",
        "zh": "- **拒绝对 KV 缓存是免费的，对状态不是。** 切换到一个有红色草稿的 verify：它们的 KV 行直接释放，但它们对 KDA "
              "状态的影响只能通过选择更早的状态来撤销，绝不能靠减法。\n"
              "- **一个问题的三种答案。** per_step 每次 verify 付出一次复制；slots 每个请求始终付出 1 + k 个状态；replay 付出"
              "重算保留 token 的代价，几乎什么都不保存。比较 48B 规模下的柱子：状态占了绝大部分。\n"
              "- **相同的 token。** 每种策略都产生普通贪心解码的 token（页面会检查）；投机解码改变的是引擎步数，而不是答案。\n"
              "- **弄坏它。** 保留被拒绝草稿之后的状态，正是 KV 缓存式回滚对递推层造成的后果：从由它计算的第一个 token 起，"
              "logits 突变。",
    },
    "spec_decode.static.title": {
        "en": "Static-shape decode: the PAD rows of a bucket",
        "zh": "静态形状 decode：桶里的 PAD 行",
    },
    "spec_decode.static.intro": {
        "en": "A CUDA graph replays the shapes it recorded, so a decode step of n requests runs as the smallest "
              "bucket of bs >= n rows (sizes {sizes} here), its metadata copied into that bucket's preallocated "
              "buffers. The bs - n tail rows are PAD rows: state index -1, no page, context 0. Every kernel must "
              "skip them: a PAD row that reads or writes a live request's slot corrupts that request. Below, "
              "{n} requests of the trained model run with `LLM(static_decode=True)`; they finish at different steps "
              "(max_tokens {mt}), so the bucket shrinks and PAD rows appear. The tokens are dynamic decoding's "
              "(checked), and the PAD slot and page still hold zeros (checked).",
        "zh": "CUDA graph 只能回放录制时的形状，所以 n 个请求的 decode 步按不小于 n 的最小桶（这里的桶大小为 {sizes}）运行，"
              "元数据被复制到该桶预先分配的缓冲区。末尾 bs - n 行是 PAD 行：状态索引 -1、没有页、上下文长度 0。每个 kernel "
              "都必须跳过它们：PAD 行一旦读写了真实请求的槽位，就会破坏那个请求。下面训练过的小模型用 "
              "`LLM(static_decode=True)` 运行 {n} 个请求；它们在不同的步结束（max_tokens {mt}），所以桶会变小、出现 PAD 行。"
              "生成的 token 与动态 decode 相同（已检查），PAD 槽位和 PAD 页仍然全为零（已检查）。",
    },
    "spec_decode.static.n_label": {
        "en": "Requests",
        "zh": "请求数",
    },
    "spec_decode.static.step_label": {
        "en": "Decode step",
        "zh": "decode 步",
    },
    "spec_decode.static.table_text": {
        "en": "{n} live rows ran as a bucket of {bs}: {pad} PAD rows. Each row reads {pages} pages (the torch "
              "attention reads whole pages, so pages are bucketed too: the next power of two); a missing page is -1 "
              "and reads as zeros.",
        "zh": "{n} 个真实行按大小为 {bs} 的桶运行：{pad} 个 PAD 行。每行读取 {pages} 个页（torch 注意力按整页读取，所以页数"
              "也分桶：向上取 2 的幂）；缺失的页为 -1，读出来是零。",
    },
    "spec_decode.static.fig.table_title": {
        "en": "Step {step}: bucket of {bs} rows, {n} live",
        "zh": "第 {step} 步：{bs} 行的桶，{n} 行为真实请求",
    },
    "spec_decode.static.fig.steps_title": {
        "en": "Rows per decode step: live and PAD",
        "zh": "每个 decode 步的行数：真实行与 PAD 行",
    },
    "spec_decode.static.fig.step_x": {
        "en": "engine step",
        "zh": "引擎步",
    },
    "spec_decode.static.fig.rows_y": {
        "en": "rows",
        "zh": "行数",
    },
    "spec_decode.static.kind.live": {
        "en": "live",
        "zh": "真实",
    },
    "spec_decode.static.kind.pad": {
        "en": "PAD",
        "zh": "PAD",
    },
    "spec_decode.static.col.row": {
        "en": "row",
        "zh": "行",
    },
    "spec_decode.static.col.kind": {
        "en": "kind",
        "zh": "类型",
    },
    "spec_decode.static.col.slot": {
        "en": "state index",
        "zh": "状态索引",
    },
    "spec_decode.static.col.context": {
        "en": "cached tokens",
        "zh": "已缓存 token",
    },
    "spec_decode.static.col.pages": {
        "en": "block table",
        "zh": "块表",
    },
    "spec_decode.static.how": {
        "en": "How the torch path skips a PAD row without branching (a graph cannot branch on data): index -1 is "
              "redirected to each pool's reserved PAD unit 0, which no request ever owns and which holds zeros; the "
              "PAD row reads zeros there, and what it writes there is zeroed again in the same call. SGLang's and vLLM's Triton kernels return early on "
              "index -1 instead. The whole step traces under `torch._dynamo` with `fullgraph=True` (no host sync, no "
              "data-dependent shape), which is what capture needs; capture itself runs only on CUDA.",
        "zh": "torch 路径如何在不分支的情况下跳过 PAD 行（graph 不能按数据分支）：索引 -1 被引向每个池中预留的 PAD 单元 0"
              "（从不属于任何请求，内容全为零）；PAD 行在那里读到零，它写到那里的内容在同一次调用中被重新置零。SGLang 和 vLLM 的 Triton kernel 则在索引"
              "为 -1 时提前返回。整个步可以在 `torch._dynamo` 下以 `fullgraph=True` 完整追踪（没有主机同步、没有依赖数据的"
              "形状），这正是捕获所需要的；真正的捕获只在 CUDA 上运行。",
    },
}
