"""UI strings of the page ``pages/home.py`` (namespace ``home.``), English and Chinese."""

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
            "**MLA** (multi-head latent attention) layers, as in Kimi Linear.\n\n"
            "A KDA layer keeps a **fixed-size recurrent state** per sequence instead of a KV cache "
            "that grows with every token. That one design choice breaks assumptions a standard "
            "serving stack relies on: prefix caching, memory pools, speculative decoding, "
            "prefill/decode disaggregation. Each page runs the engine in `kda_ref/` on your input, "
            "shows what happens step by step, and points to the matching code in this project, "
            "in SGLang and in vLLM.\n\n"
            "The model here is tiny (about 3M parameters, 3 KDA layers and 1 MLA layer) with "
            "random weights, so it runs on a CPU in a second: watch the mechanics, not the meaning "
            "of the output."
        ),
        "zh": (
            "本应用是一个**可运行的参考实现**的可视化部分，演示混合线性注意力模型的推理服务："
            "**KDA**（Kimi Delta Attention）层与 **MLA**（多头潜在注意力）层混合，如 Kimi Linear。\n\n"
            "KDA 层为每个序列保存一个**固定大小的递推状态**，而不是随 token 增长的 KV cache。"
            "这一设计打破了标准推理栈依赖的若干假设：前缀缓存、显存池、投机解码、PD 分离。"
            "每个页面都会用 `kda_ref/` 中的引擎运行你的输入，逐步展示发生了什么，"
            "并指向本项目、SGLang 和 vLLM 中对应的代码。\n\n"
            "这里的模型很小（约 300 万参数，3 个 KDA 层加 1 个 MLA 层），权重是随机的，"
            "在 CPU 上一秒内即可跑完：请关注机制，而不是输出的含义。"
        ),
    },
    "home.pages": {
        "en": "Pages",
        "zh": "页面",
    },
}
