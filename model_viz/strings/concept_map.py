"""UI strings of the page ``pages/concept_map.py`` (namespace ``concept_map.``), English and Chinese."""

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
        "en": "Every idea of the article, where it lives in this repository, and its counterpart in SGLang "
              "and vLLM. The table is the concept map itself (model_viz/concepts.py), the same data every "
              "page's concept panel shows. Type to filter by id, title, section or file.",
        "zh": "文章里的每个概念、它在本仓库中的位置，以及在 SGLang 和 vLLM 中的对应实现。表格就是概念图本身"
              "（model_viz/concepts.py），也是每个页面“概念”面板使用的同一份数据。输入文字可按 id、标题、"
              "章节或文件过滤。",
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
