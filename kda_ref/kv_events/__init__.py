"""KV-cache events on vLLM's wire: what a prefix cache holds, published as it changes, and a watcher for it.

vLLM (``vllm/distributed/kv_events.py``) and SGLang (``sglang/srt/disaggregation/kv_events.py``) publish
their prefix caches' changes over ZMQ -- ``BlockStored`` when a block of tokens becomes reusable,
``BlockRemoved`` when it is evicted, ``AllBlocksCleared`` on a reset -- for KV-aware routers (llm-d's
KV-cache manager, NVIDIA Dynamo's router). This package speaks that wire, written here from the
upstream schemas (``docs/serving.md``, "KV events"):

* :mod:`.config` -- ``--kv-events-config``: vLLM's ``KVEventsConfig`` fields, defaults and bind rule;
* :mod:`.wire` -- the frames and the msgpack schema (vLLM's tagged maps), and one decoder for vLLM's maps,
  its older positional arrays and SGLang's shapes;
* :mod:`.index` -- a prefix cache's contents as blocks (chained 64-bit hashes, one group per cache kind)
  and the events between two such indexes;
* :mod:`.publisher` -- the ZMQ publisher: PUB socket, replay ROUTER, sequence numbers, high-water mark;
* :mod:`.forest` -- the watcher's model: a prefix forest per (rank, group), rebuilt from events;
* :mod:`.subscriber` -- the watcher's socket side: subscribe, replay what was missed, notice restarts,
  record and read captures;
* :mod:`.watch` -- ``kda-ref watch URL``: discovery, metrics, the live table and ``--json``.
"""
