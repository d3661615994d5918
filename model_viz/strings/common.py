"""UI strings shared by every page (namespace ``common.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "common.fig.limit_above": {"en": "budget {n} (above this scale) ↑", "zh": "预算 {n}（超出此刻度）↑"},
    "common.family.label": {
        "en": "model",
        "zh": "模型",
    },
    "common.family.kimi_linear": {
        "en": "Kimi-Linear",
        "zh": "Kimi-Linear",
    },
    "common.family.k3": {
        "en": "Kimi K3",
        "zh": "Kimi K3",
    },
    "common.family.kimi_linear.real": {
        "en": "Kimi-Linear-48B",
        "zh": "Kimi-Linear-48B",
    },
    "common.family.k3.real": {
        "en": "Kimi K3",
        "zh": "Kimi K3",
    },
    "common.app_name": {
        "en": "KDA serving visualizer",
        "zh": "KDA 推理可视化",
    },
    "common.prev": {
        "en": "◀ previous",
        "zh": "◀ 上一步",
    },
    "common.next": {
        "en": "next ▶",
        "zh": "下一步 ▶",
    },
    "common.play": {
        "en": "▶▶ play",
        "zh": "▶▶ 播放",
    },
    "common.pause": {
        "en": "⏸ pause",
        "zh": "⏸ 暂停",
    },
    "common.playing": {
        "en": "Playing: one step every {s} s, stops at the last one.",
        "zh": "播放中：每 {s} 秒前进一步，到最后一步自动停止。",
    },
    "common.step_label": {
        "en": "step",
        "zh": "步骤",
    },
    "common.watch_title": {
        "en": "What to look for",
        "zh": "看点",
    },
    "common.trace.upload_label": {
        "en": "…or upload a trace (JSONL written by TraceRecorder.write_jsonl / kda-ref)",
        "zh": "……或上传一个 trace（由 TraceRecorder.write_jsonl / kda-ref 写出的 JSONL）",
    },
    "common.trace.source_canned": {
        "en": "Showing the canned scenario, recorded just now by the engine in `kda_ref/` ({events} events).",
        "zh": "当前显示的是内置场景，刚刚由 `kda_ref/` 中的引擎录制（{events} 个事件）。",
    },
    "common.trace.source_upload": {
        "en": "Showing the uploaded trace `{name}` ({events} events).",
        "zh": "当前显示的是上传的 trace `{name}`（{events} 个事件）。",
    },
    "common.trace.err.format": {
        "en": "The uploaded trace cannot be read: {msg}. Showing the canned scenario instead.",
        "zh": "无法读取上传的 trace：{msg}。改为显示内置场景。",
    },
    "common.trace.err.no_steps": {
        "en": "The uploaded trace has no engine step with a batch (no batch_composition event). "
              "Showing the canned scenario instead.",
        "zh": "上传的 trace 中没有任何带批次的引擎步骤（没有 batch_composition 事件）。改为显示内置场景。",
    },
    "common.trace.err.too_large": {
        "en": "The uploaded file is {n} bytes; the limit is {max_bytes} bytes. Showing the canned scenario instead.",
        "zh": "上传的文件有 {n} 字节，上限为 {max_bytes} 字节。改为显示内置场景。",
    },
    "common.trace.step_label": {
        "en": "engine step",
        "zh": "引擎步骤",
    },
    "common.concepts.title": {
        "en": "Concepts on this page",
        "zh": "本页涉及的概念",
    },
    "common.concepts.section": {
        "en": "Article section",
        "zh": "原文章节",
    },
    "common.concepts.ours": {
        "en": "This project",
        "zh": "本项目",
    },
    "common.concepts.sglang": {
        "en": "SGLang",
        "zh": "SGLang",
    },
    "common.concepts.vllm": {
        "en": "vLLM",
        "zh": "vLLM",
    },
    "common.concepts.fla": {
        "en": "flash-linear-attention",
        "zh": "flash-linear-attention",
    },
    "common.concepts.marconi": {
        "en": "Marconi",
        "zh": "Marconi",
    },
    "common.concepts.read_at": {
        "en": "read at {commit} of {repo}",
        "zh": "读取自 {repo} 的 {commit}",
    },
    "common.concepts.none": {
        "en": "no direct counterpart",
        "zh": "无直接对应",
    },
    "common.verify.title": {
        "en": "Step {step}: each verify row -- the last committed token, the drafts, the target's next token",
        "zh": "第 {step} 步：每个验证行——最后一个已提交 token、各个草稿、目标模型给出的下一个 token",
    },
    "common.verify.col.committed": {"en": "committed", "zh": "已提交"},
    "common.verify.col.draft": {"en": "draft {j}", "zh": "草稿 {j}"},
    "common.verify.col.next": {"en": "next (target)", "zh": "下一个（目标模型）"},
    "common.verify.fate.committed": {"en": "committed", "zh": "已提交"},
    "common.verify.fate.accepted": {"en": "accepted", "zh": "接受"},
    "common.verify.fate.cut": {"en": "cut (after a stop)", "zh": "截断（停止之后）"},
    "common.verify.fate.rejected": {"en": "rejected", "zh": "拒绝"},
    "common.verify.fate.next": {"en": "added", "zh": "新增"},
    "common.verify.fate.none": {"en": "not emitted", "zh": "未输出"},
    "common.verify.row.req": {"en": "request", "zh": "请求"},
    "common.verify.row.drafts": {"en": "drafts", "zh": "草稿"},
    "common.verify.row.accepted": {"en": "accepted", "zh": "接受"},
    "common.verify.row.kept": {"en": "kept (with the committed token)", "zh": "保留（含已提交 token）"},
    "common.verify.row.strategy": {"en": "spec_state", "zh": "spec_state"},
    "common.verify.row.commit": {"en": "the KDA state's rollback", "zh": "KDA 状态的回滚"},
    "common.verify.row.dropped": {"en": "dropped", "zh": "丢弃"},
    "common.verify.commit.per_step": {
        "en": "copied the state after row {row} into slot {slot}",
        "zh": "把第 {row} 行之后的状态复制到槽位 {slot}",
    },
    "common.verify.commit.slots": {
        "en": "made slot {row} of its 1 + {k} the active one: nothing copied",
        "zh": "把它的 1 + {k} 个槽位中的第 {row} 个设为活动槽位：不复制",
    },
    "common.verify.commit.replay": {
        "en": "re-ran the recurrence over the {kept} kept tokens from the committed state (ReplaySSM)",
        "zh": "从已提交的状态出发，对保留的 {kept} 个 token 重新运行递推（ReplaySSM）",
    },
    "common.verify.commit.recoverssm": {
        "en": "added the {kept} kept tokens' corrections to the committed state in closed form (RecoverSSM)",
        "zh": "以闭式把保留的 {kept} 个 token 的修正量加进已提交的状态（RecoverSSM）",
    },
    "common.verify.commit.other": {
        "en": "{strategy}: kept the state after row {row}",
        "zh": "{strategy}：保留第 {row} 行之后的状态",
    },
    "common.verify.dropped": {
        "en": "{n} positions; KV pages freed: {pages}",
        "zh": "{n} 个位置；释放的 KV 页：{pages}",
    },
    "common.cache.snapshot_note": {
        "en": "The prefix cache after {label} (snapshot {k} of {n}: the one this step belongs to, or the last before it).",
        "zh": "{label} 之后的前缀缓存（第 {k}/{n} 个快照：此步所属的那个，或此步之前的最后一个）。",
    },
    "common.cache.no_snapshot_yet": {
        "en": "No cache snapshot yet at this step: the first one was taken later.",
        "zh": "到这一步为止还没有缓存快照：第一个快照在更晚的步。",
    },
    "common.cache.none": {
        "en": "No cache snapshots: this configuration uses no prefix cache.",
        "zh": "没有缓存快照：此配置未使用前缀缓存。",
    },
    "common.concepts.not_located": {"en": "not located", "zh": "未定位"},
}
