"""The data side of the "Concept-to-source map" page: the map as rows, and a minimal reading order.

``docs/article.md#s9-4`` (concept-to-source table) and ``#s9-5`` (the minimal reading order to
re-implement it). The rows come straight from :mod:`model_viz.concepts` (the one source of truth); the reading
order only lists concept ids, so every pointer it shows is the concept map's.
"""

from __future__ import annotations
from .. import concepts
from ..i18n import current_language


# each step: a title and the concepts to read, in order (ids of model_viz.concepts)
READING_ORDER = (
    ({"en": "The recurrence, then the chunk form", "zh": "先读递推，再读 chunk 形式"},
     ("kda.recurrence", "kda.gate", "kda.delta_rule", "kda.state_evolution", "state.not_an_archive",
      "kda.chunk_form", "kda.intra_chunk")),
    ({"en": "The layer and its single entry point", "zh": "层与它唯一的入口"},
     ("sglang.kda_layer", "sglang.radix_linear_attention_forward", "sglang.kda_dispatcher")),
    ({"en": "What a request keeps: three kinds of state", "zh": "一个请求保存什么：三种状态"},
     ("state.three_kinds", "state.kda_recurrent", "state.conv", "state.mla_kv", "state.bytes")),
    ({"en": "Memory and batch metadata", "zh": "内存与批次元数据"},
     ("memory.page_kind", "memory.state_slot", "memory.unified_pool", "varlen.metadata")),
    ({"en": "The serving loop", "zh": "服务主循环"},
     ("chain.hybrid", "model.moe_grouped", "mla.prefill_attention", "engine.output_rows", "engine.continuous_batching",
      "engine.chunked_prefill", "engine.mixed_batch",
      "engine.preemption", "engine.progress", "spec.state_rollback", "spec.recoverssm", "static.pad_rows", "static.torch_compile", "cp.prefix_scan",
      "pd.state_transfer")),
    ({"en": "Behind an HTTP server", "zh": "在 HTTP 服务器之后"},
     ("server.engine_loop", "server.push_outputs", "server.engine_process", "server.heartbeat", "server.openai_api",
      "kv_events.blocks")),
    ({"en": "Prefix caching with checkpoints", "zh": "带 checkpoint 的前缀缓存"},
     ("kda.chunk_checkpoints", "sglang.radix.kda_aware", "sglang.radix.match_backoff", "sglang.radix.tombstone",
      "sglang.checkpoint_policy", "sglang.track_interval", "sglang.cow_snapshot_donate",
      "sglang.boundary_consistency", "sglang.compressed_checkpoint", "swa.vs_kda")),
    ({"en": "vLLM's block-hash cache for states", "zh": "vLLM 面向状态的块哈希缓存"},
     ("vllm.block_hash", "vllm.hybrid_hit", "vllm.state_block", "vllm.state_block.partial_hit",
      "vllm.mamba_cache_mode", "vllm.retention", "vllm.block_eviction")),
    ({"en": "How many checkpoints, and which to evict", "zh": "保留多少 checkpoint，淘汰哪一个"},
     ("cache.checkpoint_density", "marconi.eviction", "marconi.alpha_tuning")),
    ({"en": "Kimi K3: the same states, other layers", "zh": "Kimi K3：同样的状态，不同的层"},
     ("model.k3", "kda.gate_bounded", "model.attn_res", "model.mxfp4", "spec.mtp")),
)
COLUMNS = ("id", "title", "section", "ours", "sglang", "vllm", "fla", "marconi")
REF_COLUMNS = ("sglang", "vllm", "fla", "marconi")

# i18n keys of the table's column headers, written out whole so a test can see which strings are used
COLUMN_LABEL = {"id": "concept_map.col.id", "title": "concept_map.col.title", "section": "concept_map.col.section",
                "ours": "concept_map.col.ours", "sglang": "concept_map.col.sglang", "vllm": "concept_map.col.vllm",
                "fla": "concept_map.col.fla", "marconi": "concept_map.col.marconi"}


def ref_cell(ref) -> str:
    """One pointer as a table cell: ``file::symbol @commit8`` (the commit it was read at), the
    "not located" label, or a dash when the system has no counterpart."""
    if ref is None:
        return "—"
    return f"{ref.label()} @{ref.commit[:8]}" if ref.located else ref.label()


def concept_rows(query: str = "") -> list[dict]:
    """One row per concept (title in the current language), keeping those whose id, title, section or pointers
    contain ``query`` (case-insensitive)."""
    lang = current_language()
    q = (query or "").strip().lower()
    rows = []
    for c in concepts.CONCEPTS.values():
        row = {
            "id": c.id,
            "title": c.title[lang],
            "section": c.section,
            "ours": c.ours,
            **{col: ref_cell(getattr(c, col)) for col in REF_COLUMNS},
        }
        if not q or any(q in str(v).lower() for v in row.values()):
            rows.append(row)
    return rows


def concept_title(concept_id: str) -> str:
    lang = current_language()
    return concepts.get(concept_id).title[lang]


def concept_detail_markdown(concept_id: str) -> str:
    """One concept in full: its explanation and every pointer, with the commit each was read at
    (or why it could not be located)."""
    return f"**{concept_title(concept_id)}**\n\n{concepts.concept_markdown(concept_id)}"


def clamp_step(step: int | None) -> int:
    if step is None:
        return 0
    return max(0, min(int(step), len(READING_ORDER) - 1))


def reading_step_markdown(step: int) -> str:
    """The concepts of one reading-order step, with their explanations and pointers."""
    lang = current_language()
    title, ids = READING_ORDER[clamp_step(step)]
    parts = [f"### {clamp_step(step) + 1}. {title[lang]}"]
    for cid in ids:
        parts.append(concept_detail_markdown(cid))
    return "\n\n".join(parts)
