"""What a prefix cache's KV-event blocks became since the last published batch, kept as the cache changes.

A cache that is being published holds a :class:`BlockJournal` for each publisher (``PrefixCache.kv_journal``,
in a :class:`JournalSet`) and tells them every block it gains or loses as that happens: the block table when a
unit or a state comes or goes, the radix tree through :class:`~kda_ref.cache.radix.kv_blocks.RadixBlocks`. A
batch is then built from the changes alone, whatever the cache holds -- the way vLLM queues ``BlockStored`` /
``BlockRemoved`` in ``BlockPool.cache_full_blocks`` / ``_maybe_evict_cached_block`` and hands them out in
``KVCacheManager.take_events``, and as SGLang 0.5.23's ``UnifiedRadixCache`` records them in its tree core on
insert and eviction (the Python core through ``KVCacheEventRecorder.record_store`` / ``record_remove``,
``sglang/srt/mem_cache/events.py``; drained by ``take_events``). A block that comes and goes
between two batches is never named; a flush begins the next batch with ``AllBlocksCleared`` and stores what
survived it. What the journal holds is bounded by what the cache holds: a block is either new since the last
batch or gone since it, never both.

Design notes: ``docs/serving.md#5b-kv-events-the-prefix-cache-on-vllms-wire-and-kda-ref-watch``.
"""

from __future__ import annotations

from .index import GROUP_KINDS, Block, BlockIndex, chains


class BlockJournal:
    """The changes since the last :meth:`taken` (module docstring). ``start``: what the cache holds when
    publishing begins, all of it stored by the first batch."""

    def __init__(self, start: BlockIndex):
        self.block_size = start.block_size
        self.added: dict[int, dict[int, Block]] = {g: dict(start.groups[g]) for g in GROUP_KINDS}  # not yet published
        self.removed: dict[int, dict[int, Block]] = {g: {} for g in GROUP_KINDS}  # published, gone since
        self.cleared = False  # a flush since the last batch

    def add(self, group: int, h: int, block: Block) -> None:
        """The cache now holds block ``h`` of ``group``."""
        if self.removed[group].pop(h, None) is None:  # gone and back between two batches: nothing to say
            self.added[group][h] = block

    def remove(self, group: int, h: int, block: Block) -> None:
        """The cache no longer holds block ``h`` of ``group``."""
        if self.added[group].pop(h, None) is None:  # came and went between two batches: nothing to say
            self.removed[group][h] = block

    def restart(self, now: BlockIndex) -> None:
        """A flush: the next batch clears every block, then stores what the cache holds ``now``."""
        self.added = {g: dict(now.groups[g]) for g in GROUP_KINDS}
        self.removed = {g: {} for g in GROUP_KINDS}
        self.cleared = True

    def events(self, medium: str = "CPU") -> list:
        """The batch since the last :meth:`taken`, as :mod:`~kda_ref.kv_events.wire` messages: a clear after a
        flush, then per group the removals and each new chain, parents first
        (:func:`~kda_ref.kv_events.index.chains`)."""
        from .wire import AllBlocksClearedMsg, BlockRemovedMsg, BlockStoredMsg

        events: list = [AllBlocksClearedMsg()] if self.cleared else []
        for group, kind in GROUP_KINDS.items():
            if self.removed[group]:
                events.append(BlockRemovedMsg(list(self.removed[group]), medium, group))
            for chain in chains(self.added[group]):
                events.append(BlockStoredMsg([h for h, _ in chain], chain[0][1].parent,
                                             [t for _, b in chain for t in b.tokens], self.block_size, None,
                                             medium, None, group, kind))
        return events

    def taken(self) -> None:
        """The batch :meth:`events` gave was published: start the next one empty."""
        for g in GROUP_KINDS:
            self.added[g].clear()
            self.removed[g].clear()
        self.cleared = False


class JournalSet:
    """The open journals of one cache, told of each change together (a cache published by two recorders keeps
    one journal each); empty -- false -- when nobody publishes the cache, and then the cache's hooks do
    nothing. :meth:`kda_ref.cache.base.PrefixCache.kv_journal` opens one, ``close_kv_journal`` closes it."""

    def __init__(self):
        self.open_journals: list[BlockJournal] = []

    def __bool__(self) -> bool:
        return bool(self.open_journals)

    def open(self, start: BlockIndex) -> BlockJournal:
        """A new journal whose first batch stores ``start`` (what the cache holds now)."""
        journal = BlockJournal(start)
        self.open_journals.append(journal)
        return journal

    def close(self, journal: BlockJournal) -> None:
        if journal in self.open_journals:
            self.open_journals.remove(journal)

    def add(self, group: int, h: int, block: Block) -> None:
        for j in self.open_journals:
            j.add(group, h, block)

    def remove(self, group: int, h: int, block: Block) -> None:
        for j in self.open_journals:
            j.remove(group, h, block)

    def restart(self, now: BlockIndex) -> None:
        for j in self.open_journals:
            j.restart(now)
