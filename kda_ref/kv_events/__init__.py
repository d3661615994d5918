"""KV-cache events on vLLM's wire: what a prefix cache holds, published as it changes, and a watcher for it.

vLLM (``vllm/distributed/kv_events.py``) and SGLang (``sglang/srt/disaggregation/kv_events.py``) publish
their prefix caches' changes over ZMQ (``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``) for
KV-aware routers; this package speaks that wire. Server side: :mod:`.config`, :mod:`.wire`, :mod:`.index`,
:mod:`.journal`, :mod:`.publisher`; watcher side: :mod:`.forest`, :mod:`.subscriber`, :mod:`.metrics`, :mod:`.watch`.

Design notes: ``docs/serving.md#5b-kv-events-the-prefix-cache-on-vllms-wire-and-kda-ref-watch``;
the module map: ``docs/serving.md#8-the-code-module-by-module``.
"""
