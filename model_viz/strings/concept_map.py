"""UI strings of the page ``app_pages/concept_map.py`` (namespace ``concept_map.``), English and Chinese."""

STRINGS: dict[str, dict[str, str]] = {
    "concept_map.nav": {
        "en": "Concept-to-source map",
        "zh": "概念与源码对照",
    },
    "concept_map.title": {
        "en": "Concept-to-source map",
        "zh": "概念与源码对照表",
    },
    "concept_map.intro": {
        "en": "Every idea of the article (summarised section by section in docs/article.md), where it lives "
              "in this repository, and its counterpart in SGLang, vLLM, flash-linear-attention and Marconi. "
              "Each upstream pointer ends with @ and the commit its file was read at; “not located” means no "
              "file could be confirmed; pick a concept below to read why. The table is the "
              "concept map itself (model_viz/data/concepts.json), the same data every page's concept panel "
              "shows. Type to filter by id, title, section, file or commit.",
        "zh": "文章里的每个概念（docs/article.md 按章节概述了原文）、它在本仓库中的位置，以及在 SGLang、vLLM、"
              "flash-linear-attention 和 Marconi 中的对应实现。每个上游指针末尾的 @ 后面是读取该文件时的提交；"
              "“not located” 表示无法确认具体文件，在下方选择该概念即可看到原因。表格就是概念图本身"
              "（model_viz/data/concepts.json），也是每个页面“概念”面板使用的同一份数据。输入文字可按 id、标题、"
              "章节、文件或提交过滤。",
    },
    "concept_map.filter": {
        "en": "filter",
        "zh": "过滤",
    },
    "concept_map.no_match": {
        "en": "No concept matches “{query}”.",
        "zh": "没有概念匹配“{query}”。",
    },
    "concept_map.col.id": {"en": "id", "zh": "id"},
    "concept_map.col.title": {"en": "concept", "zh": "概念"},
    "concept_map.col.section": {"en": "article §", "zh": "文章章节"},
    "concept_map.col.ours": {"en": "ours", "zh": "本仓库"},
    "concept_map.col.sglang": {"en": "SGLang", "zh": "SGLang"},
    "concept_map.col.vllm": {"en": "vLLM", "zh": "vLLM"},
    "concept_map.col.fla": {"en": "flash-linear-attention", "zh": "flash-linear-attention"},
    "concept_map.col.marconi": {"en": "Marconi", "zh": "Marconi"},
    "concept_map.detail": {
        "en": "one concept in full",
        "zh": "查看单个概念的全部内容",
    },
    "concept_map.order_title": {
        "en": "A minimal reading order",
        "zh": "最小阅读顺序",
    },
    "concept_map.order_intro": {
        "en": "To re-implement it, read in this order: the math first, then the layer, the states, memory, "
              "the serving loop, and last the prefix cache that depends on all of them. Step through it.",
        "zh": "如果要自己复现，按这个顺序读：先数学，再层、状态、内存、服务主循环，最后是依赖前面一切的前缀缓存。"
              "逐步浏览。",
    },
    "concept_map.step_label": {
        "en": "reading step",
        "zh": "阅读步骤",
    },
}
