"""``engine_header``: what the pages need to read an engine's trace, in the JSONL header's keys.

The Lab writes it in its download's header (``model_viz.scenarios.lab``), the server's live trace sends it
with every answer (``kda_ref.server.live``); the pages read the layer layout, the chunk and the pool's sizes
from it (``model_viz.scenarios.engine_trace.layer_layout``, ``model_viz.figures.pool_map.unit_bytes``).
"""

from __future__ import annotations


def engine_header(llm) -> dict:
    """An ``LLM``'s layer layout, chunk, pool sizes, token budget and settings (the flat ``EngineConfig``
    keywords whose values are JSON scalars)."""
    cfg, sizes = llm.engine_config, llm.pool.sizes
    kw = cfg.to_kwargs()
    return {"kda_layers": list(llm.config.kda_layer_ids), "mla_layers": list(llm.config.mla_layer_ids),
            "chunk_size": llm.chunk_size, "memory_budget_bytes": cfg.cache.memory_budget_bytes,
            "page_size": sizes.page_size, "kv_page_bytes": sizes.kv_page_bytes, "state_bytes": sizes.state_bytes,
            "checkpoint_unit_bytes": sizes.checkpoint_bytes or sizes.state_bytes,
            "token_budget": cfg.scheduler.max_num_batched_tokens,
            "engine": {k: v for k, v in kw.items() if v is None or isinstance(v, (bool, int, float, str))}}
