"""UI strings of the page ``app_pages/checkpoint_density.py`` (namespace ``density.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "checkpoint_density.nav": {
        "en": "Checkpoint density and policies",
        "zh": "checkpoint 的密度与策略",
    },
    "checkpoint_density.caption": {
        "en": "Interval vs memory vs recompute at Kimi-Linear-48B's or Kimi K3's sizes: the cost model's break-even table, the simulator "
              "live (retention, budget, LRU vs Marconi) and the benchmark of every workload family × budget × "
              "policy.",
        "zh": "Kimi-Linear-48B 或 Kimi K3 规模下的间隔、内存与重算：成本模型的盈亏平衡表、实时模拟器（保留策略、预算、LRU 与 Marconi），"
              "以及所有负载族 × 预算 × 策略的基准结果。",
    },
    "checkpoint_density.title": {
        "en": "Checkpoint density and policies",
        "zh": "checkpoint 的密度与策略",
    },
    "checkpoint_density.intro": {
        "en": (
            "How often should the cache keep a KDA state? At {model}'s sizes one state is **{mib} MiB** "
            "({n_kda} KDA layers, fp32) while the MLA KV is **{kv} B per token** ({n_mla} layers): one state weighs as much "
            "as **{be} tokens** of KV. Dense checkpoints make every hit land close to a state but cost far more "
            "memory than the KV they accompany; sparse ones save memory but a hit resumes from the last state "
            "before the shared prefix and recomputes the rest. This page shows the trade-off three ways: the "
            "cost model's arithmetic, the simulator live on a seeded workload, and the benchmark results."
        ),
        "zh": (
            "缓存应该多久保留一个 KDA 状态？在 {model} 的规模下，一个状态是 **{mib} MiB**（{n_kda} 个 KDA 层，"
            "fp32），而 MLA KV 是**每个 token {kv} B**（{n_mla} 层）：一个状态相当于 **{be} 个 token** 的 KV。稠密的 "
            "checkpoint 让每次命中都落在状态附近，但占用的内存远多于其对应的 KV；稀疏的 checkpoint 省内存，但命中"
            "只能从共享前缀之前的最后一个状态继续，其余部分要重算。本页从三个角度展示这一权衡：成本模型的算术、"
            "在固定种子负载上实时运行的模拟器，以及基准测试结果。"
        ),
    },
    "checkpoint_density.cost.header": {
        "en": "1. The cost model: memory vs recompute per interval",
        "zh": "1. 成本模型：每种间隔的内存与重算",
    },
    "checkpoint_density.metric.state": {
        "en": "One KDA state ({model})",
        "zh": "一个 KDA 状态（{model}）",
    },
    "checkpoint_density.metric.kv": {
        "en": "MLA KV per token ({model})",
        "zh": "每个 token 的 MLA KV（{model}）",
    },
    "checkpoint_density.metric.break_even": {
        "en": "Break-even: tokens of KV per state",
        "zh": "盈亏平衡：每个状态相当的 KV token 数",
    },
    "checkpoint_density.cost.n_label": {
        "en": "Checkpoint every N tokens",
        "zh": "每 N 个 token 一个 checkpoint",
    },
    "checkpoint_density.cost.leg.ratio": {
        "en": "checkpoint bytes ÷ KV bytes of the same span",
        "zh": "checkpoint 字节 ÷ 同一跨度的 KV 字节",
    },
    "checkpoint_density.cost.leg.recompute": {
        "en": "mean recompute per hit (ms, right axis)",
        "zh": "每次命中的平均重算（毫秒，右轴）",
    },
    "checkpoint_density.cost.leg.selected": {
        "en": "N = {N}",
        "zh": "N = {N}",
    },
    "checkpoint_density.cost.hover.ratio": {
        "en": "N = %{{x}}: a checkpoint costs %{{y:.2f}}× the KV of its span",
        "zh": "N = %{{x}}：一个 checkpoint 是其跨度 KV 的 %{{y:.2f}} 倍",
    },
    "checkpoint_density.cost.hover.recompute": {
        "en": "N = %{{x}}: %{{y:.2f}} ms of prefill recomputed per hit on average",
        "zh": "N = %{{x}}：每次命中平均重算 %{{y:.2f}} 毫秒的 prefill",
    },
    "checkpoint_density.cost.break_even": {
        "en": "break-even: N = {n} tokens",
        "zh": "盈亏平衡：N = {n} 个 token",
    },
    "checkpoint_density.cost.title": {
        "en": "A checkpoint every {N} tokens costs {r}× the KV of the same span; a hit recomputes {ms} ms on average",
        "zh": "每 {N} 个 token 一个 checkpoint，占同一跨度 KV 的 {r} 倍；一次命中平均重算 {ms} 毫秒",
    },
    "checkpoint_density.cost.x": {
        "en": "checkpoint interval N (tokens, log)",
        "zh": "checkpoint 间隔 N（token，对数）",
    },
    "checkpoint_density.cost.y": {
        "en": "state bytes ÷ KV bytes (log)",
        "zh": "状态字节 ÷ KV 字节（对数）",
    },
    "checkpoint_density.cost.y2": {
        "en": "recompute per hit (ms)",
        "zh": "每次命中的重算（毫秒）",
    },
    "checkpoint_density.table.n": {
        "en": "N (tokens)",
        "zh": "N（token）",
    },
    "checkpoint_density.table.ratio": {
        "en": "state ÷ KV of the span",
        "zh": "状态 ÷ 跨度 KV",
    },
    "checkpoint_density.table.state": {
        "en": "states, MiB per 1k tokens",
        "zh": "状态，每 1k token 的 MiB",
    },
    "checkpoint_density.table.kv": {
        "en": "KV, MiB per 1k tokens",
        "zh": "KV，每 1k token 的 MiB",
    },
    "checkpoint_density.table.tokens": {
        "en": "mean tokens recomputed per hit",
        "zh": "每次命中平均重算的 token",
    },
    "checkpoint_density.table.ms": {
        "en": "their prefill (ms)",
        "zh": "其 prefill（毫秒）",
    },
    "checkpoint_density.cost.caption": {
        "en": "A hit at a uniformly random position between two checkpoints N apart recomputes (N − 1) / 2 tokens "
              "on average, priced at a prefix of {at} tokens with the cost model's assumed H200-class 989 TFLOP/s "
              "at 40% utilisation (`kda_ref.cache.cost.CostModel`): assumptions for comparing intervals, not "
              "measurements.",
        "zh": "在相距 N 的两个 checkpoint 之间的均匀随机位置命中，平均重算 (N − 1) / 2 个 token；按前缀长度 {at} "
              "个 token、成本模型假定的 H200 级 989 TFLOP/s、40% 利用率计价（`kda_ref.cache.cost.CostModel`）："
              "这是用于比较间隔的假设，不是测量值。",
    },
    "checkpoint_density.sim.header": {
        "en": "2. The simulator, live",
        "zh": "2. 实时模拟器",
    },
    "checkpoint_density.sim.text": {
        "en": "{n} requests of a seeded `scale=\"large\"` workload ({n_long} for long-document QA, whose prompts "
              "are ~22k tokens) run through the engine's own block cache "
              "(`kda_ref.sim.CacheSimulator`: no model, the pool's accounting at {model}'s sizes; block {B} tokens, "
              "hash unit {U}, mode `all`, partial hits on). Pick the retention and the memory budget: the bars "
              "compare every retention at this budget, the highlighted one is yours.",
        "zh": "一个固定种子的 `scale=\"large\"` 负载中的 {n} 个请求（长文档问答的提示词约 22k token，取 {n_long} 个），"
              "经过引擎自己的块缓存运行"
              "（`kda_ref.sim.CacheSimulator`：不运行模型，按 {model} 的规模计算内存池；块 {B} 个 token，哈希单元 {U}，"
              "模式 `all`，开启部分命中）。选择保留策略和内存预算：柱状图比较该预算下的所有保留策略，高亮的是你的选择。",
    },
    "checkpoint_density.family_label": {
        "en": "Workload family",
        "zh": "负载族",
    },
    "checkpoint_density.family.shared_system_prompt": {
        "en": "shared system prompt",
        "zh": "共享系统提示词",
    },
    "checkpoint_density.family.multi_turn": {
        "en": "multi-turn chat",
        "zh": "多轮对话",
    },
    "checkpoint_density.family.tree_search": {
        "en": "agent tree search",
        "zh": "智能体树搜索",
    },
    "checkpoint_density.family.few_shot": {
        "en": "few-shot",
        "zh": "少样本",
    },
    "checkpoint_density.family.long_document_qa": {
        "en": "long-document QA",
        "zh": "长文档问答",
    },
    "checkpoint_density.eviction_label": {
        "en": "Eviction",
        "zh": "淘汰策略",
    },
    "checkpoint_density.eviction.lru": {
        "en": "LRU",
        "zh": "LRU",
    },
    "checkpoint_density.eviction.marconi": {
        "en": "Marconi (alpha = 1)",
        "zh": "Marconi（alpha = 1）",
    },
    "checkpoint_density.interval_label": {
        "en": "Retention (checkpoint interval)",
        "zh": "保留策略（checkpoint 间隔）",
    },
    "checkpoint_density.interval.dense": {
        "en": "dense ({B})",
        "zh": "稠密（{B}）",
    },
    "checkpoint_density.interval.reachable": {
        "en": "reachable (0)",
        "zh": "可达（0）",
    },
    "checkpoint_density.interval.n": {
        "en": "every {N}",
        "zh": "每 {N}",
    },
    "checkpoint_density.budget_label": {
        "en": "Memory budget (KV + states, 48B sizes)",
        "zh": "内存预算（KV + 状态，48B 规模）",
    },
    "checkpoint_density.sim.running": {
        "en": "Simulating every retention at this budget…",
        "zh": "正在模拟该预算下的每种保留策略……",
    },
    "checkpoint_density.sim.failed": {
        "en": "The simulator cannot serve this workload at this budget for every retention: {msg}. Pick a larger "
              "budget.",
        "zh": "在该预算下，模拟器无法为每种保留策略运行该负载：{msg}。请选择更大的预算。",
    },
    "checkpoint_density.metric.hit_rate": {
        "en": "Token hit rate",
        "zh": "token 命中率",
    },
    "checkpoint_density.metric.flops": {
        "en": "Prefill FLOPs saved",
        "zh": "节省的 prefill FLOPs",
    },
    "checkpoint_density.metric.mean_ckpt": {
        "en": "Checkpoints held (mean)",
        "zh": "持有的 checkpoint（平均）",
    },
    "checkpoint_density.metric.peak_help": {
        "en": "peak {peak} GiB",
        "zh": "峰值 {peak} GiB",
    },
    "checkpoint_density.metric.evictions": {
        "en": "States evicted",
        "zh": "被淘汰的状态",
    },
    "checkpoint_density.metric.ttft": {
        "en": "Estimated TTFT (mean)",
        "zh": "估计的首 token 延迟（平均）",
    },
    "checkpoint_density.sim.caption": {
        "en": "{n} requests simulated in {wall} s for this setting ({wall_all} s for all six; cached afterwards).",
        "zh": "该设置模拟了 {n} 个请求，用时 {wall} 秒（六种设置共 {wall_all} 秒；之后使用缓存）。",
    },
    "checkpoint_density.sweep.hit": {
        "en": "token hit rate",
        "zh": "token 命中率",
    },
    "checkpoint_density.sweep.flops": {
        "en": "prefill FLOPs saved",
        "zh": "节省的 prefill FLOPs",
    },
    "checkpoint_density.sweep.ckpt": {
        "en": "checkpoints held ÷ budget (mean)",
        "zh": "持有的 checkpoint ÷ 预算（平均）",
    },
    "checkpoint_density.sweep.hover.ckpt": {
        "en": "%{{x}}: checkpoints hold %{{y:.0%}} of the budget on average (%{{customdata[0]:.2f}} GiB), "
              "%{{customdata[1]}} evictions",
        "zh": "%{{x}}：checkpoint 平均占预算的 %{{y:.0%}}（%{{customdata[0]:.2f}} GiB），淘汰 %{{customdata[1]}} 次",
    },
    "checkpoint_density.sweep.title": {
        "en": "{b} GiB: {name} → hit rate {hit}, FLOPs saved {flops}",
        "zh": "{b} GiB：{name} → 命中率 {hit}，节省 FLOPs {flops}",
    },
    "checkpoint_density.sweep.y": {
        "en": "share",
        "zh": "比例",
    },
    "checkpoint_density.sweep.x": {
        "en": "retention",
        "zh": "保留策略",
    },
    "checkpoint_density.bench.header": {
        "en": "3. Benchmark: every family × budget × policy",
        "zh": "3. 基准测试：所有负载族 × 预算 × 策略",
    },
    "checkpoint_density.bench.text": {
        "en": "`docs/bench/workloads.csv`, written by `{cmd}`: the simulator at 48B sizes for the radix policies "
              "(SGLang's extra_buffer tracking `sglang`, its `sglang no_buffer` mode, the dense baseline dense-64, "
              "every-1024, branch), the block cache's retentions (dense, interval, reachable), Marconi "
              "(reachable + utility eviction, alpha tuned) and ours. One chart per metric; colours are fixed per "
              "policy.",
        "zh": "`docs/bench/workloads.csv`，由 `{cmd}` 生成：在 48B 规模下用模拟器比较基数树策略（SGLang 的 extra_buffer 跟踪 `sglang`、它的 "
              "`sglang no_buffer` 模式、稠密基线 dense-64、every-1024、branch）、块缓存的保留策略（稠密、间隔、可达）、Marconi（可达 + 效用淘汰，alpha 自动调节）以及我们的"
              "策略。每个指标一张图；每个策略的颜色固定。",
    },
    "checkpoint_density.bench.missing": {
        "en": "`{path}` is not there yet. Produce it with `{cmd}` (every workload family × memory budget × policy "
              "in the simulator at 48B sizes), then reload this page.",
        "zh": "`{path}` 还不存在。请用 `{cmd}` 生成它（在 48B 规模下用模拟器运行所有负载族 × 内存预算 × 策略），"
              "然后重新加载本页。",
    },
    "checkpoint_density.bench.bad": {
        "en": "`{path}` cannot be read: {msg}. Regenerate it with `kda-ref bench workloads`.",
        "zh": "无法读取 `{path}`：{msg}。请用 `kda-ref bench workloads` 重新生成。",
    },
    "checkpoint_density.bench.family_label": {
        "en": "Benchmark workload family",
        "zh": "基准测试的负载族",
    },
    "checkpoint_density.bench.hit.title": {
        "en": "{family}: token hit rate per policy vs memory budget",
        "zh": "{family}：各策略的 token 命中率随内存预算的变化",
    },
    "checkpoint_density.bench.flops.title": {
        "en": "{family}: prefill FLOPs saved per policy vs memory budget",
        "zh": "{family}：各策略节省的 prefill FLOPs 随内存预算的变化",
    },
    "checkpoint_density.bench.x": {
        "en": "memory budget (GiB)",
        "zh": "内存预算（GiB）",
    },
    "checkpoint_density.bench.hit.y": {
        "en": "token hit rate",
        "zh": "token 命中率",
    },
    "checkpoint_density.bench.flops.y": {
        "en": "prefill FLOPs saved",
        "zh": "节省的 prefill FLOPs",
    },
    "checkpoint_density.bench.table": {
        "en": "The rows of this family",
        "zh": "该负载族的数据行",
    },
    "checkpoint_density.tiny.header": {
        "en": "4. The tiny engine, verified",
        "zh": "4. tiny 引擎（已核验）",
    },
    "checkpoint_density.tiny.text": {
        "en": "`docs/bench/prefix_cache.csv` (`kda-ref bench prefix-cache`): the real engine on the tiny model with "
              "the radix cache under each checkpoint policy and byte budget, every output compared with a run "
              "without cache. Bars: share of the prompt tokens reused; bar labels: what those checkpoints would "
              "weigh at 48B sizes (GiB).",
        "zh": "`docs/bench/prefix_cache.csv`（`kda-ref bench prefix-cache`）：真实引擎在 tiny 模型上使用基数树缓存，"
              "按每种 checkpoint 策略和字节预算运行，每个输出都与无缓存运行比较。柱：复用的提示词 token 比例；柱上"
              "标注：这些 checkpoint 在 48B 规模下的大小（GiB）。",
    },
    "checkpoint_density.tiny.missing": {
        "en": "`{path}` is not there: run `kda-ref bench prefix-cache` to produce it.",
        "zh": "`{path}` 不存在：运行 `kda-ref bench prefix-cache` 生成它。",
    },
    "checkpoint_density.tiny.workload_label": {
        "en": "Workload",
        "zh": "负载",
    },
    "checkpoint_density.tiny.budget": {
        "en": "budget {mb} MB",
        "zh": "预算 {mb} MB",
    },
    "checkpoint_density.tiny.hover": {
        "en": "%{{x}}: %{{y:.0%}} of the prompt tokens reused; the checkpoints would take %{{text}} GiB at 48B",
        "zh": "%{{x}}：复用了 %{{y:.0%}} 的提示词 token；这些 checkpoint 在 48B 下将占 %{{text}} GiB",
    },
    "checkpoint_density.tiny.title": {
        "en": "Tiny engine, {w}: prompt tokens reused per policy and budget",
        "zh": "tiny 引擎，{w}：各策略与预算下复用的提示词 token",
    },
    "checkpoint_density.tiny.y": {
        "en": "prompt tokens reused",
        "zh": "复用的提示词 token",
    },
    "checkpoint_density.tiny.same": {
        "en": "Every row of this file produced the same tokens as the run without cache.",
        "zh": "该文件的每一行都产生了与无缓存运行相同的 token。",
    },
    "checkpoint_density.tiny.not_same": {
        "en": "Some rows of this file did NOT produce the same tokens as the run without cache — see the CSV.",
        "zh": "该文件中有些行产生的 token 与无缓存运行不同——请查看 CSV。",
    },
    "checkpoint_density.watch": {
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
