"""The data side of the "Concept-to-source map" page: the map as rows, and a minimal reading order.

Article section 9.4 (concept-to-source table) and 9.5 (the minimal reading order to re-implement
it). The rows come straight from :mod:`model_viz.concepts` (the one source of truth); the reading
order only lists concept ids, so every pointer it shows is the concept map's.
"""

from __future__ import annotations
from .. import concepts


# each step: a title and the concepts to read, in order (ids of model_viz.concepts)
READING_ORDER = (
    ({"en": "The recurrence, then the chunk form", "zh": "先读递推，再读 chunk 形式"},
     ("kda.recurrence", "kda.gate", "kda.delta_rule", "kda.chunk_form")),
    ({"en": "The layer and its single entry point", "zh": "层与它唯一的入口"},
     ("sglang.kda_layer", "sglang.radix_linear_attention_forward", "sglang.kda_dispatcher")),
    ({"en": "What a request keeps: three kinds of state", "zh": "一个请求保存什么：三种状态"},
     ("state.three_kinds", "state.kda_recurrent", "state.conv", "state.mla_kv", "state.bytes")),
    ({"en": "Memory and batch metadata", "zh": "内存与批次元数据"},
     ("memory.page_kind", "memory.state_slot", "memory.unified_pool", "varlen.metadata")),
    ({"en": "The serving loop", "zh": "服务主循环"},
     ("chain.hybrid", "engine.continuous_batching", "engine.chunked_prefill", "engine.preemption")),
    ({"en": "Prefix caching with checkpoints", "zh": "带 checkpoint 的前缀缓存"},
     ("kda.chunk_checkpoints", "sglang.radix.kda_aware", "sglang.radix.match_backoff", "sglang.radix.tombstone",
      "sglang.checkpoint_policy", "sglang.cow_snapshot_donate", "sglang.boundary_consistency",
      "sglang.compressed_checkpoint")),
)
COLUMNS = ("id", "title", "section", "ours", "sglang", "vllm")

# i18n keys of the table's column headers, written out whole so a test can see which strings are used
COLUMN_LABEL = {"id": "concept_map.col.id", "title": "concept_map.col.title", "section": "concept_map.col.section",
                "ours": "concept_map.col.ours", "sglang": "concept_map.col.sglang", "vllm": "concept_map.col.vllm"}


def concept_rows(lang: str, query: str = "") -> list[dict]:
    """One row per concept (title in ``lang``), keeping those whose id, title, section or pointers
    contain ``query`` (case-insensitive)."""
    q = (query or "").strip().lower()
    rows = []
    for c in concepts.CONCEPTS.values():
        row = {
            "id": c.id,
            "title": c.title[lang],
            "section": c.section,
            "ours": c.ours,
            "sglang": c.sglang.label() if c.sglang else "—",
            "vllm": c.vllm.label() if c.vllm else "—",
        }
        if not q or any(q in str(v).lower() for v in row.values()):
            rows.append(row)
    return rows


def clamp_step(step: int | None) -> int:
    if step is None:
        return 0
    return max(0, min(int(step), len(READING_ORDER) - 1))


def reading_step_markdown(step: int, lang: str) -> str:
    """The concepts of one reading-order step, with their explanations and pointers."""
    title, ids = READING_ORDER[clamp_step(step)]
    parts = [f"### {clamp_step(step) + 1}. {title[lang]}"]
    for cid in ids:
        c = concepts.get(cid)
        parts.append(f"**{c.title[lang]}** · `{cid}`\n\n{concepts.concept_markdown(cid, lang)}")
    return "\n\n".join(parts)
