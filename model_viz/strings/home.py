"""UI strings of the page ``app_pages/home.py`` (namespace ``home.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "home.nav": {
        "en": "Home",
        "zh": "首页",
    },
    "home.title": {
        "en": "How a hybrid KDA + MLA model is served",
        "zh": "混合 KDA + MLA 模型是如何被推理服务的",
    },
    "home.body": {
        "en": (
            "This app is the visual half of a **runnable reference implementation** of serving a "
            "hybrid linear-attention model: **KDA** (Kimi Delta Attention) layers mixed with "
            "**MLA** (multi-head latent attention) layers, as in Kimi Linear and Kimi K3 (K3 adds attention "
            "residuals, a bounded KDA gate, a gated MLA, latent experts and an MTP layer that drafts its own "
            "tokens; the pages that show a model offer both).\n\n"
            "A KDA layer keeps a **fixed-size recurrent state** per sequence instead of a KV cache "
            "that grows with every token. That one design choice breaks assumptions a standard "
            "serving stack relies on: prefix caching, memory pools, checkpoints, speculative decoding, "
            "context parallelism and prefill/decode disaggregation. Each page runs the engine in `kda_ref/` on your input, "
            "shows what happens step by step, and points to the matching code in this project, "
            "in SGLang and in vLLM.\n\n"
            "The models here are tiny (3 KDA layers and 1 MLA layer), so everything runs on an ordinary "
            "CPU: a page's first visit runs the engine for a few seconds, later visits reuse the result. "
            "Most pages use random weights: watch the mechanics, not the meaning of the "
            "output. The state-evolution and compressed-checkpoint pages use a small model trained "
            "in this repository (on associative recall and the project's docs), whose states "
            "store something a query can read back."
        ),
        "zh": (
            "本应用是一个**可运行的参考实现**的可视化部分，演示混合线性注意力模型的推理服务："
            "**KDA**（Kimi Delta Attention）层与 **MLA**（多头潜在注意力）层混合，如 Kimi Linear 和 Kimi K3（K3 增加了"
            "注意力残差、有下界的 KDA 门、带门控的 MLA、潜空间专家，以及一个为自己起草 token 的 MTP 层；展示模型的页面两者都可选）。\n\n"
            "KDA 层为每个序列保存一个**固定大小的递推状态**，而不是随 token 增长的 KV 缓存。"
            "这一设计打破了标准推理栈依赖的若干假设：前缀缓存、内存池、checkpoint、投机解码、上下文并行以及 PD 分离。"
            "每个页面都会用 `kda_ref/` 中的引擎运行你的输入，逐步展示发生了什么，"
            "并指向本项目、SGLang 和 vLLM 中对应的代码。\n\n"
            "这里的模型都很小（3 个 KDA 层加 1 个 MLA 层），普通 CPU 就能运行：页面首次打开时引擎要运行几秒，之后复用结果。"
            "大多数页面使用随机权重："
            "请关注机制，而不是输出的含义。状态演化页和压缩 checkpoint 页使用在本仓库中训练的小模型（训练内容是"
            "关联召回和项目文档），它的状态里存着查询能读回的内容。"
        ),
    },
    "home.pages": {
        "en": "Pages",
        "zh": "页面",
    },
}
