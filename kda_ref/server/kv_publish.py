"""``kda-ref serve --kv-events-config``: the engine's prefix cache published as KV events on vLLM's wire.

:class:`KVEventRecorder` takes the cache's batches from its journal (:meth:`~kda_ref.cache.base.PrefixCache.
kv_journal`, :mod:`kda_ref.kv_events.journal`), which the cache keeps as it changes: at most one batch per
step, none when nothing changed, its cost the step's changes, not what the cache holds -- as vLLM records
changes where they happen (``BlockPool.cache_full_blocks``, ``_maybe_evict_cached_block``,
``KVCacheManager.take_events``). :class:`KVEventsObserver` runs it on the engine loop's thread and hands each
batch to the ZMQ publisher.

Design notes: ``docs/serving.md#5b-kv-events-the-prefix-cache-on-vllms-wire-and-kda-ref-watch``.
"""

from __future__ import annotations

from ..kv_events.config import KVEventsConfig
from ..kv_events.publisher import ZmqPublisher
from .loop import EngineLoop, StepObserver


class KVEventRecorder:
    """The events of one prefix cache since the last batch taken (module docstring). :meth:`pending` gives
    them without forgetting them; :meth:`commit` after they were published. It opens a journal of the cache
    (its first batch stores everything the cache holds) and :meth:`close` closes it."""

    def __init__(self, cache):
        self.cache, self.journal = cache, cache.kv_journal()

    def pending(self) -> list:
        """The events from what was published to what the cache holds now ([] when it did not change)."""
        return self.journal.events()

    def commit(self) -> None:
        """The events :meth:`pending` gave were published: they are the subscribers' state now."""
        self.journal.taken()

    def close(self) -> None:
        """Publishing ended: the cache stops telling this recorder's journal."""
        self.cache.close_kv_journal(self.journal)


class KVEventsObserver(StepObserver):
    """Publishes the engine's KV events after each step (and between steps, so a subscriber that comes to an
    idle server gets the cache as it is)."""

    def __init__(self, cache, config: KVEventsConfig, rank: int = 0):
        self.recorder = KVEventRecorder(cache)
        self.publisher = ZmqPublisher(config, rank)
        self.refused = 0  # batches the full queue refused (sent with the next one)

    def _publish(self) -> None:
        if not self.publisher.wanted:
            return
        events = self.recorder.pending()
        if not events:
            return
        if self.publisher.offer(events):
            self.recorder.commit()
        else:
            self.refused += 1

    def after_step(self, loop: EngineLoop, ended, stepped: bool) -> None:
        self._publish()

    def between_steps(self, loop: EngineLoop) -> None:
        self._publish()

    def loop_ended(self, loop: EngineLoop) -> None:
        """The loop ended: close the publisher (what is queued is sent first) and the recorder."""
        self.publisher.close()
        self.recorder.close()


def kv_events_observer(llm, config: KVEventsConfig | None) -> KVEventsObserver | None:
    """The observer for ``llm`` when ``config`` publishes (and its cache holds anything), else None."""
    if config is None or not config.publishes:
        return None
    if not llm.prefix_cache.enabled:
        raise ValueError("kv_events_config: KV events describe the prefix cache; start the server with "
                         "--prefix-cache radix or block")
    return KVEventsObserver(llm.prefix_cache, config)
