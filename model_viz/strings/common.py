"""UI strings shared by every page (namespace ``common.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
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
}
