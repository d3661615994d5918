"""A prefix cache as KV-event blocks: over random runs with eviction, the forest a watcher rebuilds from the
events (encoded and decoded as on the wire, each batch from the changes the cache told its journal) equals a
walk of the whole cache at every step, for both caches; every state block names a prefix the cache serves; a
flush is ``AllBlocksCleared``; a step that changed nothing publishes nothing; each kind of change is in the next
batch, and one that comes and goes between two batches is not. Plus the decoder against every shape the wire
has carried."""

from __future__ import annotations

import random

import msgspec
import pytest

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.cache.block.table import chain_hashes
from kda_ref.kv_events.forest import Forest
from kda_ref.kv_events.index import GROUP_KINDS, MLA_GROUP, STATE_GROUP, block_hash
from kda_ref.kv_events.journal import BlockJournal
from kda_ref.kv_events.wire import Cleared, Removed, Stored, WireError, decode_payload, encode_batch
from kda_ref.model import HybridModel
from kda_ref.server.kv_publish import KVEventRecorder
from test_engine import STATE

CACHES = {"radix": dict(prefix_cache="radix"),
          "block": dict(prefix_cache="block", block_size=32, hash_unit=16, mamba_cache_mode="align")}


@pytest.fixture(scope="module")
def model():
    return HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()


def _prompts(rng: random.Random, n: int) -> list[list[int]]:
    """Prompts over a few shared stems, so that prefixes are shared and branch."""
    stems = [[rng.randrange(1, 250) for _ in range(rng.randrange(20, 70))] for _ in range(3)]
    return [rng.choice(stems)[:rng.randrange(10, 70)] + [rng.randrange(1, 250) for _ in range(rng.randrange(1, 30))]
            for _ in range(n)]


def _prefix(forest_index: dict, h) -> list[int]:
    """The tokens of the prefix ``h`` ends, through the KV group's chain (a state block's parent lives there)."""
    kv, state = forest_index.get(MLA_GROUP, {}), forest_index.get(STATE_GROUP, {})
    parent, tokens = state[h]
    out = list(tokens)
    while parent is not None:
        parent, tokens = kv[parent]
        out = list(tokens) + out
    return out


def _serves(llm: LLM, prefix: list[int]) -> bool:
    cache = llm.prefix_cache
    if cache.kind == "radix":
        return cache.tree.match_prefix(prefix).state_len == len(prefix)
    hit = cache.table.find_longest_cache_hit(chain_hashes(prefix, cache.unit), len(prefix))
    return hit.state_len == len(prefix)


def _publish(recorder, forest):
    """One step's batch, as the server's recorder makes it (nothing when the cache did not change), through
    the wire into the forest."""
    events = recorder.pending()
    if events:
        forest.apply(decode_payload(encode_batch(events, rank=0)))
        recorder.commit()
    return events


def _holds(forest, cache) -> dict:
    """The forest, checked against a walk of the whole cache (independent of the journal), group by group."""
    got, index = forest.as_index(), cache.kv_blocks()
    for group in GROUP_KINDS:
        assert got.get(group, {}) == {h: (b.parent, b.tokens) for h, b in index.groups[group].items()}
    return got


@pytest.mark.parametrize("cache", sorted(CACHES))
@pytest.mark.parametrize("seed", [0, 1])
def test_the_forest_rebuilt_from_the_events_is_what_the_cache_holds(model, cache, seed):
    rng = random.Random(seed)
    llm = LLM(model, max_num_batched_tokens=48, max_num_seqs=3, memory_budget_bytes=6 * STATE + 400 * 320,
              **CACHES[cache])
    forest, recorder, evicted = Forest(), KVEventRecorder(llm.prefix_cache), 0
    for prompt in _prompts(rng, 14):
        llm.add_request(prompt, SamplingParams(max_tokens=rng.randrange(1, 12), ignore_eos=True))
        for _ in range(rng.randrange(1, 4)):
            if llm.has_unfinished():
                llm.step()
            events = _publish(recorder, forest)
            got = _holds(forest, llm.prefix_cache)
            for h in got.get(STATE_GROUP, {}):
                assert _serves(llm, _prefix(got, h))
            evicted += sum(len(e.block_hashes) for e in events if type(e).__name__ == "BlockRemovedMsg")
    while llm.has_unfinished():
        llm.step()
    assert evicted > 0 and got[STATE_GROUP] and got[MLA_GROUP]  # the run did evict, and holds something
    llm.flush_cache()
    events = _publish(recorder, forest)
    assert type(events[0]).__name__ == "AllBlocksClearedMsg" and forest.counts.cleared == 1
    assert not any(_holds(forest, llm.prefix_cache).values())  # a flush with nothing running leaves nothing
    assert recorder.pending() == []  # nothing changed since


def test_a_block_names_its_whole_prefix_and_the_kinds_are_vllms():
    assert block_hash(None, [1, 2]) != block_hash(block_hash(None, [9]), [1, 2])
    assert block_hash(5, [1, 2]) == block_hash(5, (1, 2)) and 0 <= block_hash(None, [3]) < 2**64
    assert GROUP_KINDS == {0: "mla_attention", 1: "mamba"}


def _pack(obj) -> bytes:
    return msgspec.msgpack.encode(obj)


STORED_MAP = {"type": "BlockStored", "block_hashes": [11, 12], "parent_block_hash": None, "token_ids": [1, 2, 3, 4],
              "block_size": 2, "lora_id": None, "medium": "GPU", "lora_name": None, "group_idx": 1,
              "kv_cache_spec_kind": "mamba"}


@pytest.mark.parametrize("payload, want", [
    # vLLM since PR #42892: tagged maps in an array batch
    (_pack([1.0, [STORED_MAP, {"type": "BlockRemoved", "block_hashes": [12], "medium": "GPU", "group_idx": 1},
                  {"type": "AllBlocksCleared"}], 0]),
     [Stored((11, 12), None, (1, 2, 3, 4), 2, 1, "mamba", "GPU"), Removed((12,), 1, "GPU"), Cleared()]),
    # vLLM before it: positional arrays (group and kind at positions 9 and 10)
    (_pack([1.0, [["BlockStored", [7], 3, [5, 6], 2, None, "GPU", None, None, 0, "mla_attention", None],
                  ["BlockRemoved", [7], "GPU", 0], ["AllBlocksCleared"]]]),
     [Stored((7,), 3, (5, 6), 2, 0, "mla_attention", "GPU"), Removed((7,), 0, "GPU"), Cleared()]),
    # SGLang 0.5.23: signed 64-bit hashes, no group, EAGLE's [previous, current] token pairs
    (_pack([1.0, [{"type": "BlockStored", "block_hashes": [-5], "parent_block_hash": None,
                   "token_ids": [[1, 2], [2, 3]], "block_size": 2, "lora_id": None}], 0]),
     [Stored((-5,), None, (2, 3), 2)]),
    # older SGLang arrays, and a batch sent as a map; digest bytes as hashes
    (_pack({"ts": 1.0, "events": [["BlockStored", [b"\x01" * 8], None, [9], 1, None, "GPU"]], "attn_dp_rank": 2}),
     [Stored((b"\x01" * 8,), None, (9,), 1, None, None, "GPU")]),
])
def test_the_decoder_reads_every_shape_into_one_model(payload, want):
    assert decode_payload(payload).events == want


@pytest.mark.parametrize("payload, says", [
    (b"\xc1", "not msgpack"), (_pack([1.0, "x"]), "a batch must be"), (_pack([1.0, [{"block_hashes": []}]]), "'type'"),
    (_pack([1.0, [["BlockMoved", [1]]]]), "unknown event tag"), (_pack([1.0, [{"type": "BlockStored"}]]), "BlockStored:"),
])
def test_a_payload_of_no_known_shape_is_named(payload, says):
    with pytest.raises(WireError, match=says):
        decode_payload(payload)


def test_our_batches_decode_with_the_rank_and_the_kinds(model):
    llm = LLM(model, prefix_cache="radix", max_num_batched_tokens=64)
    llm.generate([list(range(1, 60))], SamplingParams(max_tokens=2, ignore_eos=True))
    index = llm.prefix_cache.kv_blocks()
    bs = index.block_size
    assert bs == max(16, llm.pool.sizes.page_size)
    batch = decode_payload(encode_batch(BlockJournal(index).events(), rank=3))
    assert batch.rank == 3 and {e.kind for e in batch.events} == {"mla_attention", "mamba"}
    (stored,) = [e for e in batch.events if e.group == MLA_GROUP]  # one chain: the path has no branch
    n = len(stored.token_ids)
    assert n % bs == 0 and n == len(stored.block_hashes) * bs and n > 59 - bs
    m = min(n, 59)  # the prompt's tokens, then the generated ones
    assert stored.token_ids[:m] == tuple(range(1, 60))[:m]


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_each_recorder_starts_from_the_whole_cache_and_closing_stops_the_hooks(model, cache):
    """Two recorders on one cache keep a journal each: the second's first batch stores the whole cache as the
    first's did, neither takes the other's changes; once both closed, the cache tells no journal."""
    llm = LLM(model, max_num_batched_tokens=48, **CACHES[cache])
    first = KVEventRecorder(llm.prefix_cache)
    llm.generate([list(range(1, 50))], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
    forests = [Forest(), Forest()]
    _publish(first, forests[0])
    second = KVEventRecorder(llm.prefix_cache)
    _publish(second, forests[1])
    llm.generate([list(range(1, 30)) + [7, 7, 7]], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
    for recorder, forest in zip((first, second), forests):
        _publish(recorder, forest)
        assert any(_holds(forest, llm.prefix_cache).values())
    first.close()
    second.close()
    hooks = llm.prefix_cache.tree.observer if cache == "radix" else llm.prefix_cache.table.journals
    assert not hooks


def _batch(journal) -> dict:
    """The journal's next batch as ``{(message, group): hashes}``, then taken."""
    out: dict = {}
    for e in journal.events():
        out.setdefault((type(e).__name__, getattr(e, "group_idx", None)), []).extend(getattr(e, "block_hashes", []))
    journal.taken()
    return out


def _apply(held: dict, journal) -> None:
    """Publish the journal's next batch into ``held`` (``{group: {hash: (parent, tokens)}}``), as a watcher
    would, then take it."""
    for e in journal.events():
        name, group = type(e).__name__, getattr(e, "group_idx", None)
        if name == "AllBlocksClearedMsg":
            held.clear()
        elif name == "BlockRemovedMsg":
            for h in e.block_hashes:
                del held[group][h]
        else:
            bs, parent = e.block_size, e.parent_block_hash
            for i, h in enumerate(e.block_hashes):
                tokens = tuple(e.token_ids[i * bs:(i + 1) * bs])
                held.setdefault(group, {})[h] = (parent, tokens)
                parent = h
    journal.taken()


@pytest.mark.parametrize("seed", range(6))
def test_the_radix_journal_follows_every_cut_and_deletion(seed):
    """Random inserts, lookups (which cut nodes in two), state drops and evictions on a radix tree whose shared
    stems end at and across block boundaries: after each operation, the blocks published from the journal are
    the walk's, so a block that ends above a cut is still held when the node below it goes."""
    from kda_ref.cache.radix.kv_blocks import RadixBlocks, walk_blocks
    from kda_ref.cache.radix.tree import RadixTree
    from kda_ref.kv_events.index import BlockIndex

    rng = random.Random(seed)
    slots = iter(range(10**6))
    tree = RadixTree(free_kv=lambda units: None, free_state=lambda slot: None, chunk_size=4)
    tree.observer = RadixBlocks(tree, 4)
    journal, held = tree.observer.journals.open(BlockIndex(4)), {}
    stems = [[rng.randrange(1, 6) for _ in range(rng.randrange(3, 14))] for _ in range(3)]
    for _ in range(60):
        op = rng.random()
        tokens = rng.choice(stems)[:rng.randrange(1, 14)] + [rng.randrange(1, 6) for _ in range(rng.randrange(0, 6))]
        if op < 0.45 and tokens:
            tree.insert(tokens, list(range(len(tokens))), state=next(slots))
        elif op < 0.65:
            tree.match_prefix(tokens)
        elif op < 0.8:
            tree.evict_states(rng.randrange(1, 3))
        else:
            tree.evict_kv(rng.randrange(1, 8))
        _apply(held, journal)
        walk = walk_blocks(tree, 4)
        for group in GROUP_KINDS:
            assert held.get(group, {}) == {h: (b.parent, b.tokens) for h, b in walk.groups[group].items()}
    tree.check()


def test_each_change_is_in_the_next_batch_and_a_lookup_in_none():
    """Each kind of change the caches tell their journal is in the next batch by itself (a new path, a state, a
    state dropped, a leaf evicted; in the block table a unit, a state, an eviction); a lookup -- which may cut a
    radix node in two -- is in none, and a block that comes and goes between two batches is never named."""
    from kda_ref.cache.block.table import BlockHashTable
    from kda_ref.cache.radix.kv_blocks import RadixBlocks
    from kda_ref.cache.radix.tree import RadixTree
    from kda_ref.kv_events.index import BlockIndex

    stored, removed = "BlockStoredMsg", "BlockRemovedMsg"
    tree = RadixTree(free_kv=lambda units: None, free_state=lambda slot: None, chunk_size=4)
    tree.observer = RadixBlocks(tree, 4)
    journal = tree.observer.journals.open(BlockIndex(4))
    tree.insert([1, 2, 3, 4, 5], [0, 1, 2, 3, 4], state=7)
    assert set(_batch(journal)) == {(stored, MLA_GROUP), (stored, STATE_GROUP)}  # one full block, a partial state
    tree.insert([1, 2, 3, 4, 5, 6, 7, 8], list(range(8)), state=8)
    assert _batch(journal) == {(stored, MLA_GROUP): [block_hash(block_hash(None, [1, 2, 3, 4]), [5, 6, 7, 8])],
                               (stored, STATE_GROUP): [block_hash(block_hash(None, [1, 2, 3, 4]), [5, 6, 7, 8])]}
    tree.match_prefix([1, 2, 3])  # cuts the first node after 3 tokens
    assert _batch(journal) == {}
    tree.drop_state(tree.match_prefix([1, 2, 3, 4, 5]).state_node)
    assert set(_batch(journal)) == {(removed, STATE_GROUP)}
    tree.evict_kv(2)  # the leaf after 5 tokens goes, with its block and state
    assert set(_batch(journal)) == {(removed, MLA_GROUP), (removed, STATE_GROUP)}
    tree.insert([9, 9, 9, 9], [20, 21, 22, 23], state=9)
    tree.evict_states(1)
    tree.evict_kv(4)  # came and went between two batches
    assert _batch(journal) == {}

    table = BlockHashTable(4, 2, free_kv=lambda pages: None, free_state=lambda slot: None, allow_partial=True)
    journal = table.journals.open(table.kv_blocks())
    hashes = chain_hashes([1, 2, 3, 4], 2)
    table.insert_kv(hashes, [10, 11], 4, tokens=[1, 2, 3, 4])
    assert sorted(n.tokens for n in table.table.values()) == [(1, 2), (3, 4)]  # each unit keeps its tokens
    assert set(_batch(journal)) == {(stored, MLA_GROUP)}
    table.find_longest_cache_hit(hashes, 4)
    assert _batch(journal) == {}
    table.insert_state(hashes, 4, slot=3)
    assert set(_batch(journal)) == {(stored, STATE_GROUP)}
    table.evict_one()  # the unlocked leaf's state, then its KV
    assert set(_batch(journal)) == {(removed, MLA_GROUP), (removed, STATE_GROUP)}
