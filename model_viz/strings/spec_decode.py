"""UI strings of the page ``app_pages/spec_decode.py`` (namespace ``spec_decode.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "spec_decode.nav": {
        "en": "Speculative decoding",
        "zh": "投机解码",
    },
    "spec_decode.caption": {
        "en": "Draft k tokens, verify them in one forward, keep j: a KV cache truncates the rest, a KDA state "
              "cannot. Four ways to roll the state back, and what each costs.",
        "zh": "起草 k 个 token，一次前向验证，保留 j 个：KV 缓存可以截掉其余部分，KDA 状态不行。四种回滚状态的方法，以及"
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
              "number below is read from the engine's trace and stats, and every strategy produces plain greedy "
              "decoding's tokens exactly.",
        "zh": "投机解码先猜若干个 token（草稿），再让模型用一次前向把它们全部检查一遍。KV 缓存回滚被拒绝的草稿时只需丢掉对应"
              "的行。而起草之后的 KDA 状态已经把草稿折叠进去了，也无法从中读回任何更早的状态。因此 verify 从不写入已提交的"
              "状态：它保存从任意被接受位置继续所需的东西。\n\n"
              "训练过的小模型用 n-gram 草稿续写仓库文档中的一张重复表格（提示词 {P} 个 token，生成 {N} 个），在真实引擎上"
              "对每种策略各运行一次。下面每个数字都读自引擎的 trace 和统计，每种策略都精确地产生普通贪心解码的 token。",
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
              "(the states after the other tokens were never computed); **recoverssm** sums the first {kept} "
              "tokens' corrections into it in closed form (drawn below).",
        "zh": "目标模型接受了 {k} 个草稿中的 **{a}** 个，并加上自己的下一个 token；请求保留 {kept} 个已验证 token，从第 "
              "{j} 个已验证 token 之后的状态继续。**per_step** 把这个状态从 verify 的暂存区复制到请求的槽位；**slots** "
              "只是把第 {j} 个槽位设为活动槽位（不复制）；**replay** 把前 {kept} 个 token 的输入折叠进已提交的状态（其余 "
              "token 之后的状态从未被计算）；**recoverssm** 用闭式把前 {kept} 个 token 的修正量加进已提交的状态（见下图）。",
    },
    "spec_decode.strategy.per_step": {
        "en": "the state after every verified token, as scratch for the step; the commit copies the kept one "
              "into the request's slot",
        "zh": "每个被验证 token 之后的状态，作为本步的暂存；提交时把保留的那个复制到请求的槽位",
    },
    "spec_decode.strategy.slots": {
        "en": "1 + k slots per request, held all the time; the verify writes token t's state into slot t, the "
              "commit only switches the active slot",
        "zh": "每个请求始终持有 1 + k 个槽位；verify 把第 t 个 token 的状态写进第 t 个槽位，提交时只切换活动槽位",
    },
    "spec_decode.strategy.replay": {
        "en": "each token's kernel inputs (conv input, k, v, g, β), no state; the commit runs the recurrence "
              "again over the kept tokens",
        "zh": "每个 token 的 kernel 输入（卷积输入、k、v、g、β），不保存状态；提交时对保留的 token 重新运行递推",
    },
    "spec_decode.strategy.recoverssm": {
        "en": "each token's key, gate and correction u_t, no state; the commit sums the kept tokens' k_t u_tᵀ, "
              "each decayed by the gates after it: a closed form, no serial replay",
        "zh": "每个 token 的键、门控和修正量 u_t，不保存状态；提交时把保留 token 的 k_t u_tᵀ 按其后的门控衰减后求和："
              "闭式，无需串行重放",
    },
    "spec_decode.table.strategy": {
        "en": "strategy",
        "zh": "策略",
    },
    "spec_decode.table.keeps": {
        "en": "what a verify keeps; when the state exists",
        "zh": "verify 保存什么；状态何时存在",
    },
    "spec_decode.table.slots": {
        "en": "slots",
        "zh": "槽位",
    },
    "spec_decode.table.bytes_48b": {
        "en": "Kimi-Linear-48B, k = {k}",
        "zh": "Kimi-Linear-48B，k = {k}",
    },
    "spec_decode.table.bytes_k3": {
        "en": "Kimi K3, k = {k}",
        "zh": "Kimi K3，k = {k}",
    },
    "spec_decode.fig.bytes_k3": {
        "en": "per request at Kimi K3, k = {k}",
        "zh": "Kimi K3 每个请求，k = {k}",
    },
    "spec_decode.cf_title": {
        "en": "RecoverSSM's commit, term by term",
        "zh": "RecoverSSM 的提交，逐项展开",
    },
    "spec_decode.cf_text": {
        "en": "The verify never wrote the state: for every token it stored the correction the delta rule "
              "wrote, u_t = β_t (v_t − (Diag(α_t) S_(t−1))ᵀ k_t). u_t already carries everything token t read "
              "from the earlier state, so the state after the kept tokens is a sum, not a replay: "
              "S_j = Diag(∏ α) S_0 + Σ_t Diag(∏_(s>t) α_s) k_t u_tᵀ. The grey bar is the committed state decayed "
              "through all kept tokens, each green bar one token's term, the blue line how much of a term "
              "survives the gates after it. The page checks every commit against the serial fold of the same "
              "corrections (vLLM's `_commit_kda_state_kernel` walks them backwards instead).",
        "zh": "verify 从不写入状态：它为每个 token 保存 delta 规则写入的修正量 u_t = β_t (v_t − (Diag(α_t) "
              "S_(t−1))ᵀ k_t)。u_t 已经包含了 token t 从更早状态读到的一切，所以保留 token 之后的状态是一个求和，而不是"
              "重放：S_j = Diag(∏ α) S_0 + Σ_t Diag(∏_(s>t) α_s) k_t u_tᵀ。灰色柱是已提交状态经过所有保留 token 衰减后"
              "的部分，每根绿色柱是一个 token 的项，蓝线表示一项在其后的门控下还剩多少。页面把每次提交与同一组修正量的"
              "串行折叠逐一对比（vLLM 的 `_commit_kda_state_kernel` 则是倒序遍历它们）。",
    },
    "spec_decode.fig.cf_start": {
        "en": "decayed S_0",
        "zh": "衰减后的 S_0",
    },
    "spec_decode.fig.cf_norm": {
        "en": "norm of the piece",
        "zh": "该项的范数",
    },
    "spec_decode.fig.cf_decay": {
        "en": "decay left after token t",
        "zh": "token t 之后剩余的衰减",
    },
    "spec_decode.fig.cf_title": {
        "en": "Verify {n}: {kept} kept tokens, ‖S_0‖ = {start:.2f} → ‖S_j‖ = {final:.2f} (serial fold differs "
              "by {gap:.1e})",
        "zh": "第 {n} 次 verify：保留 {kept} 个 token，‖S_0‖ = {start:.2f} → ‖S_j‖ = {final:.2f}（与串行折叠相差 "
              "{gap:.1e}）",
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
    "spec_decode.bytes_text": {
        "en": "**per_step** needs 1 + k states as scratch, but only while a request verifies; **slots** keeps 1 + k "
              "states per request all the time (reserved at admission); **replay** keeps only 1 + k tokens' inputs "
              "(conv input, k, v, g, β: {tok} B per token here against {state} B for one state), paid for by "
              "recomputing the kept tokens after acceptance; **recoverssm** keeps as little (conv input, k, g and "
              "the correction u) and pays a closed-form sum instead of a serial replay. At K3's size one state is "
              "hundreds of MiB: one slot per request instead of 1 + k is what vLLM's RecoverSSM change (PR #51855) "
              "reports as +10.97% effective cache capacity at the same 46.48 GiB cache budget (Kimi K3, TP8).",
        "zh": "**per_step** 需要 1 + k 个状态作暂存，但只在请求 verify 时需要；**slots** 每个请求始终保留 1 + k 个状态（在准入"
              "时预留）；**replay** 只保存 1 + k 个 token 的输入（卷积输入、k、v、g、β：这里每个 token {tok} B，而一个状态是 "
              "{state} B），代价是在接受之后重算保留下来的 token；**recoverssm** 保存的同样很少（卷积输入、k、g 和修正量 "
              "u），付出的是一次闭式求和而不是串行重放。在 K3 的规模下一个状态有数百 MiB：每个请求一个槽位而不是 1 + k 个，"
              "vLLM 的 RecoverSSM 改动（PR #51855）报告为：在同样 46.48 GiB 的缓存预算下，有效缓存容量 +10.97%（Kimi K3，TP8）。",
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
              "- **Four answers to one question.** per_step pays a copy per verify; slots pays 1 + k states per "
              "request, always; replay pays a recomputation of the kept tokens and keeps almost nothing; "
              "recoverssm keeps as little and replaces the recomputation with a closed-form sum. Compare the "
              "bars at K3: the state dominates.\n"
              "- **Same tokens.** Every strategy produces plain greedy decoding's tokens (the page checks it); "
              "speculation changes the number of engine steps, never the answer.\n"
              "- **Break it.** Keeping the state after the rejected drafts is what a KV-cache-style rollback "
              "would do to a recurrent layer: the logits jump at the first token computed from it.",
        "zh": "- **拒绝对 KV 缓存是免费的，对状态不是。** 切换到一个有红色草稿的 verify：它们的 KV 行直接释放，但它们对 KDA "
              "状态的影响只能通过选择更早的状态来撤销，绝不能靠减法。\n"
              "- **一个问题的四种答案。** per_step 每次 verify 付出一次复制；slots 每个请求始终付出 1 + k 个状态；replay 付出"
              "重算保留 token 的代价，几乎什么都不保存；recoverssm 保存的同样很少，并用闭式求和代替重算。比较 K3 规模下的"
              "柱子：状态占了绝大部分。\n"
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
        "en": "{live} ran as a bucket of {bs}: {pad}. Each row reads {pages} pages (the torch "
              "attention reads whole pages, so pages are bucketed too: the next power of two); a missing page is -1 "
              "and reads as zeros.",
        "zh": "{live}按大小为 {bs} 的桶运行：{pad}。每行读取 {pages} 个页（torch 注意力按整页读取，所以页数"
              "也分桶：向上取 2 的幂）；缺失的页为 -1，读出来是零。",
    },
    "spec_decode.static.live_rows.one": {"en": "{n} live row", "zh": "{n} 个真实行"},
    "spec_decode.static.live_rows.many": {"en": "{n} live rows", "zh": "{n} 个真实行"},
    "spec_decode.static.pad_rows.one": {"en": "{n} PAD row", "zh": "{n} 个 PAD 行"},
    "spec_decode.static.pad_rows.many": {"en": "{n} PAD rows", "zh": "{n} 个 PAD 行"},
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
