"""UI strings of the page ``app_pages/lab.py`` (namespace ``lab.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    'lab.nav': {
        "en": 'Lab: your own workload',
        "zh": '实验台：运行你自己的负载',
    },
    'lab.caption': {
        "en": 'Run your own prompts, conversation or workload family on the real engine, step through every view, compare two configurations and download the trace.',
        "zh": '在真实引擎上运行你自己的提示词、多轮对话或负载族，逐步查看每个视图，比较两种配置，并下载 trace。',
    },
    'lab.title': {
        "en": 'Lab: your workload on the real engine',
        "zh": '实验台：在真实引擎上运行你的负载',
    },
    'lab.intro': {
        "en": "Every other page teaches one mechanism on a scenario chosen for it. Here you choose: type prompts (or a conversation, or pick a synthetic workload family), set the engine as `LLM(...)` would be set, run it on the real engine with the trace recorder on, then step through the run with the views of the other pages. Tick **compare** to run the same workload under a second configuration: the page checks that both gave the same tokens (greedy decoding must not depend on the cache, speculation or the schedule) and shows what the second one cost instead. The run can be downloaded as the JSONL trace (every page's upload box reads it) and as a Chrome trace for Perfetto.",
        "zh": '其他每个页面都在专门挑选的场景上讲解一个机制。这里由你来选：输入提示词（或一段对话，或选一个合成负载族），像设置 `LLM(...)` 一样设置引擎，在开启 trace 记录的真实引擎上运行，然后用其他页面的视图逐步查看这次运行。勾选**比较**可在第二种配置下运行同一负载：页面会检查两者生成的 token 是否相同（贪心解码不应依赖于缓存、投机解码或调度），并展示第二种配置的开销。运行结果可以下载为 JSONL trace（每个页面的上传框都能读取）和用于 Perfetto 的 Chrome trace。',
    },
    'lab.workload_title': {
        "en": '1. Workload',
        "zh": '1. 负载',
    },
    'lab.source_label': {
        "en": 'requests from',
        "zh": '请求来源',
    },
    'lab.source.prompts': {
        "en": 'prompts I type',
        "zh": '我输入的提示词',
    },
    'lab.source.conversation': {
        "en": 'a conversation (each turn extends the last)',
        "zh": '多轮对话（每一轮延续上一轮）',
    },
    'lab.source.family': {
        "en": 'a workload family',
        "zh": '负载族',
    },
    'lab.family_label': {
        "en": 'family (kda_ref.workloads)',
        "zh": '负载族（kda_ref.workloads）',
    },
    'lab.family_seed': {
        "en": 'seed',
        "zh": '随机种子',
    },
    'lab.family_n': {
        "en": 'requests',
        "zh": '请求数',
    },
    'lab.family_note': {
        "en": "The family at the chosen scale (`large` prompts are mostly longer than the Lab's bound), its first requests in arrival order, run one after the other on one engine. Its prompts are token ids drawn from the byte vocabulary, so the text of the outputs means nothing: the point is the prefix sharing.",
        "zh": '使用该负载族的所选规模（`large` 规模的提示词大多超出实验台的上限），按到达顺序取前几个请求，在同一个引擎上依次运行。它的提示词是从字节词表中抽取的 token id，因此输出文本没有意义：要看的是前缀共享。',
    },
    'lab.prompts_label': {
        "en": 'prompts, separated by a line holding only `---` (at most {max}, {bytes} bytes each)',
        "zh": '提示词，用只含 `---` 的一行分隔（最多 {max} 条，每条最多 {bytes} 字节）',
    },
    'lab.prompts_default': {
        "en": 'The KDA state of a hybrid model is a fixed-size matrix per head.\n---\nThe KDA state of a hybrid model is',
        "zh": 'The KDA state of a hybrid model is a fixed-size matrix per head.\n---\nThe KDA state of a hybrid model is',
    },
    'lab.turns_label': {
        "en": 'the turns of one conversation, separated by a line holding only `---`: each turn is sent after the previous turn and its answer (at most {max} turns, {bytes} bytes each)',
        "zh": '同一段对话的各轮，用只含 `---` 的一行分隔：每一轮都接在上一轮及其回答之后发送（最多 {max} 轮，每轮最多 {bytes} 字节）',
    },
    'lab.turns_default': {
        "en": 'What is the KDA state of a hybrid model?\n---\nDoes it grow with the prompt?\n---\nThen at which tokens can a cache restore it?',
        "zh": 'What is the KDA state of a hybrid model?\n---\nDoes it grow with the prompt?\n---\nThen at which tokens can a cache restore it?',
    },
    'lab.mode_label': {
        "en": 'how the prompts arrive',
        "zh": '提示词如何到达',
    },
    'lab.mode.batch': {
        "en": 'all at once (one batch)',
        "zh": '同时到达（一个批次）',
    },
    'lab.mode.sequential': {
        "en": 'one after the other',
        "zh": '依次到达',
    },
    'lab.max_tokens': {
        "en": 'new tokens per request',
        "zh": '每个请求生成的 token 数',
    },
    'lab.temperature': {
        "en": 'temperature (0: greedy)',
        "zh": '温度（0：贪心）',
    },
    'lab.sample_seed': {
        "en": 'sampling seed',
        "zh": '采样种子',
    },
    'lab.engine_title': {
        "en": '2. Engine',
        "zh": '2. 引擎',
    },
    'lab.model_label': {
        "en": 'model',
        "zh": '模型',
    },
    'lab.model.trained': {
        "en": 'the trained tiny model (shipped)',
        "zh": '训练过的 tiny 模型（随仓库提供）',
    },
    'lab.model.trained_k3': {
        "en": 'the trained K3 demo, with its MTP layer (shipped)',
        "zh": '训练过的 K3 演示模型，带 MTP 层（随仓库提供）',
    },
    'lab.model.tiny': {
        "en": 'the random tiny model',
        "zh": '随机权重的 tiny 模型',
    },
    'lab.model.folder': {
        "en": 'a checkpoint folder',
        "zh": 'checkpoint 文件夹',
    },
    'lab.folder_label': {
        "en": 'checkpoint folder (below an allowed folder)',
        "zh": 'checkpoint 文件夹（须位于允许的文件夹之下）',
    },
    'lab.folder_note': {
        "en": 'Checkpoint folders are off: whoever starts the app can allow folders with the environment variable `{env}` (paths separated by `:`).',
        "zh": 'checkpoint 文件夹未开启：启动应用的人可以用环境变量 `{env}` 允许若干文件夹（路径用 `:` 分隔）。',
    },
    'lab.compare_label': {
        "en": 'compare with a second configuration',
        "zh": '与第二种配置比较',
    },
    'lab.run_a': {
        "en": 'Configuration A',
        "zh": '配置 A',
    },
    'lab.run_b': {
        "en": 'Configuration B',
        "zh": '配置 B',
    },
    'lab.cache_label': {
        "en": 'prefix cache',
        "zh": '前缀缓存',
    },
    'lab.cache.none': {
        "en": 'none',
        "zh": '无',
    },
    'lab.cache.radix': {
        "en": 'radix tree (SGLang)',
        "zh": '基数树（SGLang）',
    },
    'lab.cache.block': {
        "en": 'state blocks (vLLM)',
        "zh": '状态块（vLLM）',
    },
    'lab.spec_label': {
        "en": 'speculative decoding (drafter: n-gram or MTP, below)',
        "zh": '投机解码（草稿器：n-gram 或 MTP，见下方）',
    },
    'lab.group.scheduler': {
        "en": 'scheduler',
        "zh": '调度器',
    },
    'lab.group.cache': {
        "en": 'memory pool',
        "zh": '内存池',
    },
    'lab.group.radix': {
        "en": 'radix tree options',
        "zh": '基数树选项',
    },
    'lab.group.block': {
        "en": 'state block options',
        "zh": '状态块选项',
    },
    'lab.group.speculative': {
        "en": 'speculation',
        "zh": '投机解码',
    },
    'lab.group.static': {
        "en": 'static-shape decode',
        "zh": '静态形状 decode',
    },
    'lab.run': {
        "en": 'Run',
        "zh": '运行',
    },
    'lab.running': {
        "en": 'Running the engine ...',
        "zh": '引擎运行中……',
    },
    'lab.progress': {
        "en": 'starting: {n} requests',
        "zh": '开始：{n} 个请求',
    },
    'lab.progress_run': {
        "en": 'configuration {run}: step {steps}, {done} of {n} requests done',
        "zh": '配置 {run}：第 {steps} 步，已完成 {done}/{n} 个请求',
    },
    'lab.no_run': {
        "en": 'Set a workload and an engine above, then press **Run**.',
        "zh": '在上方设置负载和引擎，然后点击**运行**。',
    },
    'lab.results_title': {
        "en": '3. The run',
        "zh": '3. 运行结果',
    },
    'lab.cmp_same': {
        "en": 'Both configurations gave the same tokens for all {n} requests (greedy decoding: they must).',
        "zh": '两种配置对全部 {n} 个请求生成了相同的 token（贪心解码：必须如此）。',
    },
    'lab.cmp_differ': {
        "en": 'The configurations gave different tokens: {same} of {n} requests agree. Under greedy decoding this is a bug of the engine; please report it with the downloaded traces.',
        "zh": '两种配置生成的 token 不同：{n} 个请求中只有 {same} 个一致。在贪心解码下这是引擎的缺陷；请附上下载的 trace 报告它。',
    },
    'lab.cmp_sampled': {
        "en": 'Sampling with temperature > 0: {same} of {n} requests gave the same tokens; equality is only required under greedy decoding.',
        "zh": '温度 > 0 的采样：{n} 个请求中有 {same} 个生成了相同的 token；只有贪心解码才要求相同。',
    },
    'lab.shown_label': {
        "en": 'show',
        "zh": '显示',
    },
    'lab.tab.chain': {
        "en": 'Execution chain',
        "zh": '执行链',
    },
    'lab.tab.pool': {
        "en": 'Memory pool',
        "zh": '内存池',
    },
    'lab.tab.cache': {
        "en": 'Prefix cache',
        "zh": '前缀缓存',
    },
    'lab.tab.spec': {
        "en": 'Speculative verify',
        "zh": '投机验证',
    },
    'lab.tab.requests': {
        "en": 'Requests',
        "zh": '请求',
    },
    'lab.tab.download': {
        "en": 'Download',
        "zh": '下载',
    },
    'lab.cache_events': {
        "en": 'Prefix-cache operations in this step',
        "zh": '此步的前缀缓存操作',
    },
    'lab.cache_none': {
        "en": 'none in this step',
        "zh": '此步没有',
    },
    'lab.no_spec': {
        "en": 'No speculative verify steps: this configuration does not speculate.',
        "zh": '没有投机验证步：此配置未启用投机解码。',
    },
    'lab.download_note': {
        "en": "The JSONL trace opens in every page's upload box and in `kda-ref`; the Chrome trace opens in [Perfetto](https://ui.perfetto.dev) or `chrome://tracing`: one track per request and per layer, steps as spans, cache operations as instants. Its time axis is logical (one step = 1 ms): it shows order, not measured time.",
        "zh": 'JSONL trace 可以在每个页面的上传框和 `kda-ref` 中打开；Chrome trace 可以在 [Perfetto](https://ui.perfetto.dev) 或 `chrome://tracing` 中打开：每个请求、每一层各一条轨道，步是区间，缓存操作是瞬时事件。它的时间轴是逻辑时间（一步 = 1 ms）：表示先后顺序，而非实测耗时。',
    },
    'lab.download_jsonl': {
        "en": 'Download the trace (JSONL)',
        "zh": '下载 trace（JSONL）',
    },
    'lab.download_chrome': {
        "en": 'Download the Chrome trace (JSON)',
        "zh": '下载 Chrome trace（JSON）',
    },
    'lab.download_both': {
        "en": 'Two configurations were compared: each has its own traces below, A first, then B.',
        "zh": '比较了两种配置：下面各有各的 trace，先是 A，然后是 B。',
    },
    'lab.download_jsonl_run': {
        "en": 'Download configuration {run}: the trace (JSONL)',
        "zh": '下载配置 {run} 的 trace（JSONL）',
    },
    'lab.download_chrome_run': {
        "en": 'Download configuration {run}: the Chrome trace (JSON)',
        "zh": '下载配置 {run} 的 Chrome trace（JSON）',
    },
    'lab.col.total': {
        "en": 'total',
        "zh": '总计',
    },
    'lab.col.differs': {
        "en": 'differs',
        "zh": '不同',
    },
    'lab.col.setting': {
        "en": 'setting',
        "zh": '设置',
    },
    'lab.col.request': {
        "en": 'request',
        "zh": '请求',
    },
    'lab.col.prompt_len': {
        "en": 'prompt tokens',
        "zh": '提示词 token 数',
    },
    'lab.col.output_len': {
        "en": 'output tokens',
        "zh": '输出 token 数',
    },
    'lab.col.finish': {
        "en": 'finish',
        "zh": '结束原因',
    },
    'lab.col.ttft': {
        "en": 'first token (ms)',
        "zh": '首个 token（ms）',
    },
    'lab.col.latency': {
        "en": 'latency (ms)',
        "zh": '延迟（ms）',
    },
    'lab.col.preemptions': {
        "en": 'preemptions',
        "zh": '抢占次数',
    },
    'lab.col.text': {
        "en": 'output',
        "zh": '输出',
    },
    'lab.total.steps': {
        "en": 'engine steps',
        "zh": '引擎步数',
    },
    'lab.total.prompt_tokens': {
        "en": 'prompt tokens',
        "zh": '提示词 token 数',
    },
    'lab.total.computed': {
        "en": 'prompt tokens computed',
        "zh": '计算的提示词 token',
    },
    'lab.total.reused': {
        "en": 'prompt tokens reused from the prefix cache',
        "zh": '从前缀缓存复用的提示词 token',
    },
    'lab.total.recomputed': {
        "en": 'prompt tokens computed again (preempted requests start over)',
        "zh": '重新计算的提示词 token（被抢占的请求从头开始）',
    },
    'lab.total.generated': {
        "en": 'generated tokens',
        "zh": '生成的 token',
    },
    'lab.total.forward': {
        "en": 'tokens through the model (drafts included)',
        "zh": '经过模型的 token（含草稿）',
    },
    'lab.total.preemptions': {
        "en": 'preemptions',
        "zh": '抢占次数',
    },
    'lab.total.checkpoint_bytes': {
        "en": 'checkpoint bytes held at the end',
        "zh": '结束时持有的 checkpoint 字节数',
    },
    'lab.total.peak_pool': {
        "en": 'peak pool use',
        "zh": '内存池峰值占用',
    },
    'lab.total.budget': {
        "en": 'pool budget',
        "zh": '内存池预算',
    },
    'lab.total.spec_accepted': {
        "en": 'draft tokens accepted',
        "zh": '被接受的草稿 token',
    },
    'lab.total.spec_drafts': {
        "en": 'draft tokens proposed',
        "zh": '提出的草稿 token',
    },
    'lab.total.wall': {
        "en": 'wall time (s)',
        "zh": '墙钟时间（s）',
    },
    'lab.total.tps': {
        "en": 'generated tokens / s',
        "zh": '每秒生成 token 数',
    },
    'lab.fig.accepted': {
        "en": 'accepted drafts',
        "zh": '被接受的草稿',
    },
    'lab.fig.rejected': {
        "en": 'rejected drafts (state rolled back)',
        "zh": '被拒绝的草稿（状态回滚）',
    },
    'lab.fig.verify_title': {
        "en": '{n} speculative verifies',
        "zh": '{n} 次投机验证',
    },
    'lab.fig.verify_x': {
        "en": 'step · request',
        "zh": '步 · 请求',
    },
    'lab.fig.drafts': {
        "en": 'draft tokens',
        "zh": '草稿 token',
    },
    'lab.ev.request': {
        "en": 'request {r}',
        "zh": '请求 {r}',
    },
    'lab.ev.position': {
        "en": 'at token {p}',
        "zh": '位于第 {p} 个 token',
    },
    'lab.err.no_prompts': {
        "en": 'Give at least one prompt.',
        "zh": '请至少输入一条提示词。',
    },
    'lab.err.too_many': {
        "en": '{n} requests: the Lab runs at most {max}.',
        "zh": '{n} 个请求：实验台最多运行 {max} 个。',
    },
    'lab.err.empty': {
        "en": 'Prompt {i} is empty.',
        "zh": '第 {i} 条提示词为空。',
    },
    'lab.err.prompt_bytes': {
        "en": 'Prompt {i} has {n} bytes; the Lab takes at most {max} per prompt.',
        "zh": '第 {i} 条提示词有 {n} 字节；实验台每条最多接受 {max} 字节。',
    },
    'lab.err.prompt_tokens': {
        "en": 'Request {i} would have up to {n} prompt tokens; the Lab takes at most {max} (a conversation turn '
              'resends every earlier prompt and answer, each answer counted at its max tokens).',
        "zh": '第 {i} 个请求最多将有 {n} 个提示词 token；实验台最多接受 {max} 个（对话的每一轮都会重发之前所有的'
              '提示词和回答，每个回答按其最大 token 数计）。',
    },
    'lab.err.sampling': {
        "en": 'sampling: expected SamplingParams, got {got}.',
        "zh": 'sampling：应为 SamplingParams，实际为 {got}。',
    },
    'lab.err.new_tokens': {
        "en": '{n} new tokens per request: the Lab generates at most {max}.',
        "zh": '每个请求生成 {n} 个 token：实验台最多生成 {max} 个。',
    },
    'lab.err.family': {
        "en": 'No workload family {family!r}; the families are {families}.',
        "zh": '没有名为 {family!r} 的负载族；可选的有 {families}。',
    },
    'lab.err.workload': {
        "en": 'The workload cannot be generated: {msg}',
        "zh": '无法生成该负载：{msg}',
    },
    'lab.err.no_model_dirs': {
        "en": 'Checkpoint folders are not allowed: set `{env}` when starting the app.',
        "zh": '不允许使用 checkpoint 文件夹：启动应用时请设置 `{env}`。',
    },
    'lab.err.not_allowed': {
        "en": '`{path}` is not below a folder allowed by `{env}`.',
        "zh": '`{path}` 不在 `{env}` 允许的文件夹之下。',
    },
    'lab.err.unreadable': {
        "en": '`{path}` cannot be read as a checkpoint folder (it needs a config.json and its weights).',
        "zh": '`{path}` 无法作为 checkpoint 文件夹读取（需要 config.json 和权重文件）。',
    },
    'lab.err.load': {
        "en": '`{path}` could not be loaded: {msg}',
        "zh": '无法加载 `{path}`：{msg}',
    },
    'lab.err.config_and_args': {
        "en": 'Give either an EngineConfig or keywords, not both (got {args}).',
        "zh": '请只给出 EngineConfig 或关键字参数之一，不要同时给出（收到 {args}）。',
    },
    'lab.err.trace_full': {
        "en": 'The run recorded more than {max} trace events and was stopped; use fewer or shorter requests.',
        "zh": '这次运行记录的 trace 事件超过 {max} 个，已停止；请减少请求数量或缩短请求。',
    },
    'lab.col.error': {
        "en": 'error',
        "zh": '错误',
    },
    'lab.refused_title': {
        "en": 'Requests the engine finished with an error ({n})',
        "zh": '被引擎以错误结束的请求（{n} 个）',
    },
    'lab.refused_none_ran': {
        "en": 'No step ran a forward: every request was refused (see above).',
        "zh": '没有任何一步执行前向计算：所有请求都被拒绝了（见上）。',
    },
    'lab.err.engine': {
        "en": 'The engine refused this: {msg}',
        "zh": '引擎拒绝了该设置：{msg}',
    },
    'lab.err.mode': {
        "en": 'mode {mode!r}: must be one of {modes}.',
        "zh": 'mode {mode!r}：必须是 {modes} 之一。',
    },
    'lab.err.bad_blocks': {
        "en": "The trace's block-cache snapshots cannot be read: {msg}. The other views still draw.",
        "zh": "无法读取 trace 中的块缓存快照：{msg}。其他视图仍照常显示。",
    },
    'lab.err.path_nul': {
        "en": 'The folder path contains a NUL byte, which no path can.',
        "zh": '文件夹路径中含有 NUL 字节，任何路径都不能含有它。',
    },
    'lab.err.path_long': {
        "en": 'The folder path has {n:,} characters; no path is longer than {max:,}.',
        "zh": '文件夹路径有 {n:,} 个字符；任何路径都不超过 {max:,} 个字符。',
    },
    'lab.err.bad_path': {
        "en": '`{path}` cannot be looked up: {why}.',
        "zh": '无法查找 `{path}`：{why}。',
    },
    'lab.err.escapes': {
        "en": '`{path}` holds `{name}`, which resolves to `{target}`, outside the folders allowed by `{env}`; '
              'nothing in it is loaded.',
        "zh": '`{path}` 中的 `{name}` 解析到 `{target}`，位于 `{env}` 允许的文件夹之外；其中的文件都不会被加载。',
    },
    'lab.err.not_a_file': {
        "en": '`{path}` holds `{name}`, which is not a regular file (a FIFO, socket or device); nothing in it is loaded.',
        "zh": '`{path}` 中的 `{name}` 不是普通文件（而是 FIFO、套接字或设备）；其中的文件都不会被加载。',
    },
    'lab.err.too_many_files': {
        "en": '`{path}` holds more than {max} entries; a checkpoint folder holds a few.',
        "zh": '`{path}` 中的条目超过 {max} 个；checkpoint 文件夹通常只有几个文件。',
    },
    'lab.err.compare_sizes': {
        "en": 'The two runs have {a} and {b} requests; they cannot be compared.',
        "zh": '两次运行分别有 {a} 和 {b} 个请求，无法比较。',
    },
    'lab.field.max_num_seqs': {
        "en": 'most requests running at once',
        "zh": '同时运行的最多请求数',
    },
    'lab.field.max_num_batched_tokens': {
        "en": 'token budget of one step; longer prefills are chunked to it',
        "zh": '一步的 token 预算；更长的 prefill 会按它分块',
    },
    'lab.field.mixed_batch': {
        "en": "how a step mixing decodes and prefill chunks runs the KDA layers ('chunk': one chunk kernel for all; 'split': one kernel per phase)",
        "zh": "decode 与 prefill 分块混合的一步如何运行 KDA 层（'chunk'：全部用一个分块 kernel；'split'：每个阶段一个 kernel）",
    },
    'lab.field.memory_budget_bytes': {
        "en": 'bytes shared by KV pages, KDA states and checkpoints',
        "zh": 'KV 页、KDA 状态和 checkpoint 共用的字节数',
    },
    'lab.field.checkpoint_dtype': {
        "en": 'how checkpoints are stored (bf16 / int8: compressed)',
        "zh": 'checkpoint 的存储方式（bf16 / int8：压缩）',
    },
    'lab.field.checkpoint_policy': {
        "en": 'which boundaries become checkpoints',
        "zh": '哪些边界会成为 checkpoint',
    },
    'lab.field.checkpoint_interval': {
        "en": "tokens between checkpoints for 'every_n' (a multiple of the chunk size)",
        "zh": "'every_n' 下两个 checkpoint 之间的 token 数（分块大小的整数倍）",
    },
    'lab.field.max_checkpoints_per_path': {
        "en": "most checkpoints kept on one path (SGLang's mamba_max_states_per_path; empty: no limit)",
        "zh": '一条路径上最多保留的 checkpoint 数（SGLang 的 mamba_max_states_per_path；留空：不限）',
    },
    'lab.field.track_interval': {
        "en": "'sglang': decode tokens between tracked states (a multiple of the chunk size)",
        "zh": "'sglang'：相邻两个被跟踪状态之间的 decode token 数（分块大小的整数倍）",
    },
    'lab.field.block_size': {
        "en": 'tokens per state block (a multiple of hash_unit)',
        "zh": '每个状态块的 token 数（hash_unit 的整数倍）',
    },
    'lab.field.hash_unit': {
        "en": 'tokens per hash (the KV page size)',
        "zh": '每个哈希覆盖的 token 数（即 KV 页大小）',
    },
    'lab.field.mamba_cache_mode': {
        "en": "'all': a state at every block boundary; 'align': the states the schedule reaches",
        "zh": "'all'：每个块边界都保存状态；'align'：只保存调度到达的状态",
    },
    'lab.field.retention_interval': {
        "en": 'states kept: empty every block, 0 reachable boundaries only, N one per N tokens',
        "zh": '保留哪些状态：留空为每个块，0 为仅可达边界，N 为每 N 个 token 一个',
    },
    'lab.field.partial_hits': {
        "en": 'states at hash-unit boundaries inside a block',
        "zh": '在块内部的哈希单元边界上也保存状态',
    },
    'lab.field.eviction': {
        "en": 'which state block is evicted first',
        "zh": '先逐出哪个状态块',
    },
    'lab.field.marconi_alpha': {
        "en": "Marconi's weight of FLOPs saved per byte against recency",
        "zh": 'Marconi 中每字节节省的 FLOPs 相对于最近使用程度的权重',
    },
    'lab.field.replay_granularity': {
        "en": "where a hit's state replay starts ('unit' needs partial_hits)",
        "zh": "命中后状态重放的起点粒度（'unit' 需要 partial_hits）",
    },
    'lab.field.num_speculative_tokens': {
        "en": 'k: draft tokens verified per step',
        "zh": 'k：每步验证的草稿 token 数',
    },
    'lab.field.speculative': {
        "en": "the drafter: n-gram lookup in the request's own tokens, or the model's own MTP layer (K3)",
        "zh": '起草器：在请求自身的 token 中做 n-gram 查找，或用模型自己的 MTP 层（K3）',
    },
    'lab.field.spec_state': {
        "en": 'how the KDA state rolls back after a rejection',
        "zh": '拒绝草稿后 KDA 状态如何回滚',
    },
    'lab.field.spec_tree_width': {
        "en": '> 1: a draft tree with up to this many candidates per position (per_step only)',
        "zh": '> 1：草稿树，每个位置最多这么多候选（仅限 per_step）',
    },
    'lab.field.prompt_lookup_min': {
        "en": 'the shortest suffix n-gram the drafter matches',
        "zh": '草稿器匹配的最短后缀 n-gram',
    },
    'lab.field.prompt_lookup_max': {
        "en": 'the longest suffix n-gram (tried first)',
        "zh": '最长的后缀 n-gram（优先尝试）',
    },
    'lab.field.static_decode': {
        "en": 'run all-decode and uniform verify steps over fixed per-bucket metadata',
        "zh": '用按桶固定的元数据运行纯 decode 步和统一的验证步',
    },
    'lab.upload_label': {
        "en": "or open a trace instead (JSONL: downloaded here, or recorded by `kda-ref generate --trace`)",
        "zh": "或者打开一个 trace（JSONL：在这里下载的，或由 `kda-ref generate --trace` 记录的）",
    },
    'lab.requests_from_trace': {
        "en": "A trace does not hold the requests' texts and timings: run the workload here to see them.",
        "zh": "trace 中没有请求的文本和耗时：在这里运行负载即可看到。",
    },
    'lab.family_scale': {
        "en": "scale",
        "zh": "规模",
    },
    'lab.fig.kv_unit': {
        "en": "KV of the hash unit cached",
        "zh": "该哈希单元的 KV 已缓存",
    },
    'lab.fig.state_kept': {
        "en": "a state kept at the unit's end",
        "zh": "单元末尾保留了状态",
    },
    'lab.fig.block_title': {
        "en": "Block cache after {label} along its tokens ({n} hash units; dotted: block boundaries)",
        "zh": "{label} 之后沿其 token 的块缓存（{n} 个哈希单元；虚线：块边界）",
    },
    'lab.fig.block_x': {
        "en": "token position (end of each hash unit)",
        "zh": "token 位置（每个哈希单元的末尾）",
    },
}
