"""UI strings of the page ``app_pages/state_blocks.py`` (namespace ``state_blocks.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "state_blocks.nav": {
        "en": "vLLM state blocks",
        "zh": "vLLM 状态块",
    },
    "state_blocks.caption": {
        "en": "The vLLM-style block cache: chained hashes per hash unit, the hybrid hit as a fixed point of the KV "
              "group and the state group, null blocks and the one real state block, partial hits with "
              "copy-on-write, retention masks, mode all vs align.",
        "zh": "vLLM 风格的块缓存：按哈希单元计算的链式哈希、KV 组与状态组的混合命中不动点、空块与唯一的真实状态块、"
              "带写时复制的部分命中、保留掩码、all 与 align 模式。",
    },
    "state_blocks.title": {
        "en": "vLLM state blocks",
        "zh": "vLLM 状态块",
    },
    "state_blocks.intro": {
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
    "state_blocks.mode_label": {
        "en": "mamba_cache_mode",
        "zh": "mamba_cache_mode",
    },
    "state_blocks.mode.all": {
        "en": "all",
        "zh": "all",
    },
    "state_blocks.mode.align": {
        "en": "align",
        "zh": "align",
    },
    "state_blocks.mode_help.all": {
        "en": "**all**: a state at every block boundary the request passes (the chunk kernel's chunk-start states "
              "provide the ones inside a step).",
        "zh": "**all**：请求经过的每个块边界都有状态（步内的边界由 chunk 内核的 chunk 起始状态提供）。",
    },
    "state_blocks.mode_help.align": {
        "en": "**align**: a state only where a scheduler step ends on a block boundary; a {budget}-token chunk is "
              "cut down to a block boundary and the last cacheable block is forced.",
        "zh": "**align**：只在调度步恰好结束于块边界时有状态；{budget} 个 token 的分块被截到块边界，并强制最后一个"
              "可缓存的块。",
    },
    "state_blocks.retention_label": {
        "en": "Retention (retention_interval)",
        "zh": "保留策略（retention_interval）",
    },
    "state_blocks.ret.dense": {
        "en": "dense (None)",
        "zh": "稠密（None）",
    },
    "state_blocks.ret.interval": {
        "en": "interval {N}",
        "zh": "间隔 {N}",
    },
    "state_blocks.ret.reachable": {
        "en": "reachable (0)",
        "zh": "可达（0）",
    },
    "state_blocks.ret_help.dense": {
        "en": "**Dense** keeps every state the mode produces.",
        "zh": "**稠密**保留模式产生的每个状态。",
    },
    "state_blocks.ret_help.interval": {
        "en": "**Interval {N}** keeps one state per {N} tokens plus the reachable boundaries.",
        "zh": "**间隔 {N}** 每 {N} 个 token 保留一个状态，另加可达边界。",
    },
    "state_blocks.ret_help.reachable": {
        "en": "**Reachable** keeps only shared-prefix junctions and the replay point (held pending, committed at "
              "finish).",
        "zh": "**可达**只保留共享前缀的分叉点和重放点（先作为待定状态持有，结束时提交）。",
    },
    "state_blocks.partial_label": {
        "en": "partial hits",
        "zh": "部分命中",
    },
    "state_blocks.partial_help.on": {
        "en": "**Partial hits on**: a state may also sit on a {U}-token unit boundary inside a block (junctions, "
              "the prompt's last unit).",
        "zh": "**部分命中开启**：状态也可以位于块内部的 {U} token 单元边界上（分叉点、提示词的最后一个单元）。",
    },
    "state_blocks.partial_help.off": {
        "en": "**Partial hits off**: states only at block ends; junctions are rounded down to a block (units of "
              "{U} tokens still name the KV).",
        "zh": "**部分命中关闭**：状态只在块末尾；分叉点向下取整到块（KV 仍按 {U} token 的单元命名）。",
    },
    "state_blocks.running": {
        "en": "Running the five requests with and without the cache…",
        "zh": "正在分别在有缓存和无缓存的情况下运行五个请求……",
    },
    "state_blocks.verified": {
        "en": "Checked on this run: all {n} outputs equal the same prompts run without a cache (identical tokens, "
              "max |Δ logit| {diff}); for every request the replayed fixed point equals the engine's hit and its "
              "cached_prompt_tokens, the engine's block table is null blocks + the hit's slot, every saved state "
              "is one the retention keeps.",
        "zh": "本次运行已核验：全部 {n} 个输出与无缓存运行相同提示词的结果一致（token 完全相同，最大 |Δ logit| "
              "{diff}）；每个请求重放的不动点等于引擎的命中及其 cached_prompt_tokens，引擎的块表是空块 + 命中的槽位，"
              "每个保存的状态都是保留策略要保留的。",
    },
    "state_blocks.step_label": {
        "en": "Request",
        "zh": "请求",
    },
    "state_blocks.current": {
        "en": "**{r}** ({i}/{n}): {plen} prompt tokens — **{hit}** reused, **{computed}** computed. {desc}",
        "zh": "**{r}**（{i}/{n}）：提示词 {plen} 个 token——复用 **{hit}** 个，计算 **{computed}** 个。{desc}",
    },
    "state_blocks.req.r0": {
        "en": "The system prompt + question 1: nothing is cached yet.",
        "zh": "系统提示词 + 问题 1：此时什么都没有缓存。",
    },
    "state_blocks.req.r1": {
        "en": "The same system prompt + question 2: the KV group matches up to the junction, the state group only "
              "up to the last state before it.",
        "zh": "相同的系统提示词 + 问题 2：KV 组一直匹配到分叉点，状态组只能到分叉点之前的最后一个状态。",
    },
    "state_blocks.req.r2": {
        "en": "Diverges at token 44, inside block 1 (tokens 32–64) of the system prompt.",
        "zh": "在第 44 个 token 处分叉，位于系统提示词的第 1 块（token 32–64）内部。",
    },
    "state_blocks.req.r3": {
        "en": "The system prompt + question 3: with partial hits it resumes from the state r1 saved at its "
              "junction, inside a block.",
        "zh": "系统提示词 + 问题 3：开启部分命中时，它从 r1 在分叉点（块内部）保存的状态继续。",
    },
    "state_blocks.req.r4": {
        "en": "An exact repeat of r0's prompt.",
        "zh": "与 r0 的提示词完全相同。",
    },
    "state_blocks.metric.kv": {
        "en": "KV group match (tokens)",
        "zh": "KV 组匹配（token）",
    },
    "state_blocks.metric.hit": {
        "en": "Hybrid hit (tokens)",
        "zh": "混合命中（token）",
    },
    "state_blocks.metric.states": {
        "en": "States cached after it",
        "zh": "之后缓存的状态数",
    },
    "state_blocks.metric.bytes": {
        "en": "Their bytes (tiny model)",
        "zh": "其字节数（tiny 模型）",
    },
    "state_blocks.partial_callout": {
        "en": "**Partial hit**: {r} resumes from a state at token {pos}, *inside* block {block}. The cached "
              "state (slot {src}) is never written: it is copied into the request's own running slot {dst} "
              "(copy-on-write) before the forward continues from there.",
        "zh": "**部分命中**：{r} 从第 {pos} 个 token 处的状态继续，该位置在第 {block} 块*内部*。缓存的状态（槽位 "
              "{src}）从不被写入：在前向从那里继续之前，它先被复制到请求自己的运行槽位 {dst}（写时复制）。",
    },
    "state_blocks.axis.tokens": {
        "en": "token position (grid = block boundaries)",
        "zh": "token 位置（网格线 = 块边界）",
    },
    "state_blocks.row.kv": {
        "en": "KV group: hash units →",
        "zh": "KV 组：哈希单元 →",
    },
    "state_blocks.row.state": {
        "en": "state group: ← search",
        "zh": "状态组：← 搜索",
    },
    "state_blocks.leg.kv_hit": {
        "en": "unit cached, matched left to right",
        "zh": "单元已缓存，从左到右匹配",
    },
    "state_blocks.leg.kv_unreachable": {
        "en": "unit cached after a miss (unusable)",
        "zh": "未命中之后的已缓存单元（不可用）",
    },
    "state_blocks.leg.kv_miss": {
        "en": "unit not cached",
        "zh": "单元未缓存",
    },
    "state_blocks.hover.unit": {
        "en": "hash unit {idx}: tokens {a}–{b}",
        "zh": "哈希单元 {idx}：token {a}–{b}",
    },
    "state_blocks.leg.scan.none": {
        "en": "scanned: not cached",
        "zh": "已扫描：未缓存",
    },
    "state_blocks.leg.scan.kv_only": {
        "en": "scanned: KV, no state",
        "zh": "已扫描：有 KV，无状态",
    },
    "state_blocks.leg.scan.skipped": {
        "en": "scanned: state inside a block (partial hits off)",
        "zh": "已扫描：块内部的状态（部分命中关闭）",
    },
    "state_blocks.leg.scan.hit": {
        "en": "the state found",
        "zh": "找到的状态",
    },
    "state_blocks.hover.scan.none": {
        "en": "boundary %{{x}}: not cached (scan step %{{customdata[0]}})",
        "zh": "边界 %{{x}}：未缓存（扫描第 %{{customdata[0]}} 步）",
    },
    "state_blocks.hover.scan.kv_only": {
        "en": "boundary %{{x}}: KV cached, no state here — keep searching left (scan step %{{customdata[0]}})",
        "zh": "边界 %{{x}}：KV 已缓存，这里没有状态——继续向左搜索（扫描第 %{{customdata[0]}} 步）",
    },
    "state_blocks.hover.scan.skipped": {
        "en": "boundary %{{x}}: a state inside a block, not usable without partial hits (scan step "
              "%{{customdata[0]}})",
        "zh": "边界 %{{x}}：块内部的状态，未开启部分命中时不可用（扫描第 %{{customdata[0]}} 步）",
    },
    "state_blocks.hover.scan.hit": {
        "en": "boundary %{{x}}: the last state at or before the KV match — the state group's answer (scan step "
              "%{{customdata[0]}})",
        "zh": "边界 %{{x}}：不超过 KV 匹配的最后一个状态——状态组的答案（扫描第 %{{customdata[0]}} 步）",
    },
    "state_blocks.leg.has_state": {
        "en": "unit holding a state",
        "zh": "存有状态的单元",
    },
    "state_blocks.vline.known": {
        "en": "candidate {n}",
        "zh": "候选 {n}",
    },
    "state_blocks.vline.kv": {
        "en": "KV {n}",
        "zh": "KV {n}",
    },
    "state_blocks.vline.hit": {
        "en": "hit {n}",
        "zh": "命中 {n}",
    },
    "state_blocks.vline.end": {
        "en": "end {n}",
        "zh": "末尾 {n}",
    },
    "state_blocks.hit.title": {
        "en": "{r} ({i}/{n}): the KV group matches {kv} tokens left to right, the state group searches right to "
              "left → hit = {hit} (fixed point after {rounds} rounds)",
        "zh": "{r}（{i}/{n}）：KV 组从左到右匹配 {kv} 个 token，状态组从右到左搜索 → 命中 = {hit}（{rounds} 轮后"
              "达到不动点）",
    },
    "state_blocks.row.table": {
        "en": "logical block table",
        "zh": "逻辑块表",
    },
    "state_blocks.row.active": {
        "en": "running state",
        "zh": "运行中的状态",
    },
    "state_blocks.row.saved": {
        "en": "saved by this request",
        "zh": "本请求保存的",
    },
    "state_blocks.row.after": {
        "en": "cache afterwards",
        "zh": "之后的缓存",
    },
    "state_blocks.leg.null": {
        "en": "null block (no physical state)",
        "zh": "空块（没有物理状态）",
    },
    "state_blocks.hover.null": {
        "en": "block {b} (tokens {a}–{e}): a null block — part of the logical prefix, no state behind it",
        "zh": "第 {b} 块（token {a}–{e}）：空块——属于逻辑前缀，但背后没有状态",
    },
    "state_blocks.leg.real": {
        "en": "the hit's real state block",
        "zh": "命中的真实状态块",
    },
    "state_blocks.hover.real": {
        "en": "block {b}: the one real block — checkpoint slot {slot}, the state after {p} tokens",
        "zh": "第 {b} 块：唯一的真实块——checkpoint 槽位 {slot}，即 {p} 个 token 之后的状态",
    },
    "state_blocks.text.slot": {
        "en": "slot {slot}",
        "zh": "槽位 {slot}",
    },
    "state_blocks.leg.compute": {
        "en": "computed by this request",
        "zh": "由本请求计算",
    },
    "state_blocks.hover.compute": {
        "en": "tokens {a}–{e}: computed by this request",
        "zh": "token {a}–{e}：由本请求计算",
    },
    "state_blocks.text.active": {
        "en": "active slot {slot}",
        "zh": "活动槽位 {slot}",
    },
    "state_blocks.text.fresh": {
        "en": "fresh slot (from zero)",
        "zh": "新槽位（从零开始）",
    },
    "state_blocks.leg.active": {
        "en": "the request's running state",
        "zh": "请求运行中的状态",
    },
    "state_blocks.hover.active": {
        "en": "the running state advances from token {a} to {e}",
        "zh": "运行中的状态从 token {a} 推进到 {e}",
    },
    "state_blocks.leg.step_end": {
        "en": "a scheduler step ends",
        "zh": "调度步结束",
    },
    "state_blocks.hover.step_end": {
        "en": "a scheduler step ended at %{{x}}",
        "zh": "一个调度步在 %{{x}} 结束",
    },
    "state_blocks.op.checkpoint_create": {
        "en": "checkpoint_create",
        "zh": "checkpoint_create（步内）",
    },
    "state_blocks.op.snapshot": {
        "en": "snapshot",
        "zh": "snapshot（步末）",
    },
    "state_blocks.op.commit": {
        "en": "commit",
        "zh": "commit（提交）",
    },
    "state_blocks.op.donate": {
        "en": "donate",
        "zh": "donate（捐赠）",
    },
    "state_blocks.op.pending": {
        "en": "pending replay point",
        "zh": "待定重放点",
    },
    "state_blocks.hover.saved": {
        "en": "%{{customdata[0]}} at %{{x}} → checkpoint slot %{{customdata[1]}}",
        "zh": "%{{customdata[0]}}，位置 %{{x}} → checkpoint 槽位 %{{customdata[1]}}",
    },
    "state_blocks.hover.pending": {
        "en": "pending replay point at %{{x}}: held, committed at finish if no later state replaces it",
        "zh": "位于 %{{x}} 的待定重放点：先持有，若之后没有状态取代它，结束时提交",
    },
    "state_blocks.leg.after": {
        "en": "state held by the cache on this path",
        "zh": "缓存在此路径上持有的状态",
    },
    "state_blocks.hover.after": {
        "en": "after the request the cache holds a state at %{{x}} (slot %{{customdata[0]}})",
        "zh": "请求结束后缓存在 %{{x}} 持有一个状态（槽位 %{{customdata[0]}}）",
    },
    "state_blocks.text.cow": {
        "en": "copy-on-write: slot {src} → slot {dst}",
        "zh": "写时复制：槽位 {src} → 槽位 {dst}",
    },
    "state_blocks.table.title": {
        "en": "{r}: block table = {nulls} null block(s) + {real} real state block; {saved} state(s) saved during "
              "the request",
        "zh": "{r}：块表 = {nulls} 个空块 + {real} 个真实状态块；请求期间保存了 {saved} 个状态",
    },
    "state_blocks.row.offered": {
        "en": "produced (mode {mode})",
        "zh": "产生的（模式 {mode}）",
    },
    "state_blocks.row.saved_here": {
        "en": "saved in this run",
        "zh": "本次运行保存的",
    },
    "state_blocks.leg.keep": {
        "en": "boundary kept",
        "zh": "保留的边界",
    },
    "state_blocks.leg.drop": {
        "en": "boundary dropped",
        "zh": "丢弃的边界",
    },
    "state_blocks.hover.keep": {
        "en": "boundary %{{x}}: kept",
        "zh": "边界 %{{x}}：保留",
    },
    "state_blocks.hover.drop": {
        "en": "boundary %{{x}}: dropped",
        "zh": "边界 %{{x}}：丢弃",
    },
    "state_blocks.leg.reach": {
        "en": "reachable (junction / replay point)",
        "zh": "可达（分叉点 / 重放点）",
    },
    "state_blocks.leg.offered": {
        "en": "a state existed here",
        "zh": "此处曾有状态",
    },
    "state_blocks.leg.saved": {
        "en": "saved",
        "zh": "已保存",
    },
    "state_blocks.ret.title": {
        "en": "{r}: block boundaries beyond the hit {bs}; {name} keeps {kept}; saved in this run: {saved}",
        "zh": "{r}：命中之后的块边界 {bs}；{name} 保留 {kept}；本次运行保存：{saved}",
    },
    "state_blocks.bar.reused": {
        "en": "prompt tokens reused",
        "zh": "复用的提示词 token",
    },
    "state_blocks.bar.computed": {
        "en": "prompt tokens computed",
        "zh": "计算的提示词 token",
    },
    "state_blocks.bar.states": {
        "en": "states in the cache",
        "zh": "缓存中的状态数",
    },
    "state_blocks.bar.tokens": {
        "en": "tokens",
        "zh": "token 数",
    },
    "state_blocks.bar.title": {
        "en": "Reuse per request — {r}: {reused} reused, {computed} computed",
        "zh": "每个请求的复用——{r}：复用 {reused}，计算 {computed}",
    },
    "state_blocks.events_title": {
        "en": "Cache events of this request",
        "zh": "本请求的缓存事件",
    },
    "state_blocks.events_none": {
        "en": "no cache events",
        "zh": "没有缓存事件",
    },
    "state_blocks.ev.match": {
        "en": "step {step} · **match** {r}: KV group {kv} tokens, state group {st} tokens ({rounds} rounds) · "
              "`{concept}`",
        "zh": "第 {step} 步 · **match** {r}：KV 组 {kv} 个 token，状态组 {st} 个 token（{rounds} 轮）· `{concept}`",
    },
    "state_blocks.ev.partial_hit": {
        "en": "step {step} · **partial_hit** {r} at {pos}: inside a block, slot {ckpt} · `{concept}`",
        "zh": "第 {step} 步 · **partial_hit** {r}，位置 {pos}：在块内部，槽位 {ckpt} · `{concept}`",
    },
    "state_blocks.ev.copy_on_write": {
        "en": "step {step} · **copy_on_write** {r}: slot {ckpt} → active slot {active} (state after {pos} tokens) · "
              "`{concept}`",
        "zh": "第 {step} 步 · **copy_on_write** {r}：槽位 {ckpt} → 活动槽位 {active}（{pos} 个 token 之后的状态）· "
              "`{concept}`",
    },
    "state_blocks.ev.checkpoint_create": {
        "en": "step {step} · **checkpoint_create** {r} at {pos}: a chunk-start state inside the step → slot {ckpt} · "
              "`{concept}`",
        "zh": "第 {step} 步 · **checkpoint_create** {r}，位置 {pos}：步内的 chunk 起始状态 → 槽位 {ckpt} · "
              "`{concept}`",
    },
    "state_blocks.ev.snapshot": {
        "en": "step {step} · **snapshot** {r} at {pos}: the state at a step end → slot {ckpt} · `{concept}`",
        "zh": "第 {step} 步 · **snapshot** {r}，位置 {pos}：步末的状态 → 槽位 {ckpt} · `{concept}`",
    },
    "state_blocks.ev.pending": {
        "en": "step {step} · **pending** {r} at {pos}: held as the replay point (slot {ckpt}), not kept by the "
              "retention · `{concept}`",
        "zh": "第 {step} 步 · **pending** {r}，位置 {pos}：作为重放点持有（槽位 {ckpt}），保留策略不保留它 · "
              "`{concept}`",
    },
    "state_blocks.ev.commit": {
        "en": "step {step} · **commit** {r} at {pos}: the replay point enters the cache at finish (slot {ckpt}) · "
              "`{concept}`",
        "zh": "第 {step} 步 · **commit** {r}，位置 {pos}：请求结束时重放点进入缓存（槽位 {ckpt}）· `{concept}`",
    },
    "state_blocks.ev.donate": {
        "en": "step {step} · **donate** {r} at {pos}: the finished request's running slot becomes a cached state "
              "(slot {ckpt}) · `{concept}`",
        "zh": "第 {step} 步 · **donate** {r}，位置 {pos}：结束请求的运行槽位成为缓存状态（槽位 {ckpt}）· `{concept}`",
    },
    "state_blocks.ev.evict": {
        "en": "step {step} · **evict**: slot {ckpt} freed ({policy}) · `{concept}`",
        "zh": "第 {step} 步 · **evict**：释放槽位 {ckpt}（{policy}）· `{concept}`",
    },
    "state_blocks.watch": {
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
}
