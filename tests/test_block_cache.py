"""The hashed block cache on its own (no model): chained hashes, the hybrid fixed-point hit,
alignment, partial hits, retention masks, locks, LRU and Marconi eviction, the cost model."""

import pytest

from kda_ref.cache.block import BlockHashTable, chain_hashes, retention_mask
from kda_ref.cache.cost import CostModel
from kda_ref.model import ModelConfig

U, B = 4, 16  # hash unit, block size


class Freed:
    def __init__(self):
        self.kv, self.states = [], []


def make(eviction="lru", partial=False, alpha=1.0, cost=None):
    f = Freed()
    c = BlockHashTable(B, U, free_kv=f.kv.extend, free_state=f.states.append, eviction=eviction, alpha=alpha,
                       cost=cost, allow_partial=partial)
    return c, f


def cache_prefix(c, tokens, pages_from=100, states=()):
    """Insert the KV of ``tokens`` (whole units) and states at the given boundaries."""
    hs = chain_hashes(tokens, U)
    upto = len(hs) * U
    c.insert_kv(hs, list(range(pages_from, pages_from + len(hs))), upto)
    for i, p in enumerate(states):
        assert c.insert_state(hs, p, 1000 + pages_from + i)
    return hs


def test_chain_hashes_name_whole_prefixes():
    a, b = list(range(12)), list(range(12))
    b[1] = 99  # differs in the first unit only
    ha, hb = chain_hashes(a, U), chain_hashes(b, U)
    assert len(ha) == 3 and ha[0] != hb[0]
    assert all(x != y for x, y in zip(ha, hb)), "a chained hash must change with any earlier token"
    assert chain_hashes(a[:8], U) == ha[:2]
    assert chain_hashes(a[8:], U, ha[1]) == ha[2:], "continuing the chain from a parent hash"
    assert chain_hashes(a[:3], U) == [], "a partial unit has no hash"


def test_hit_is_the_fixed_point_of_both_groups():
    c, _ = make()
    toks = list(range(64))
    hs = cache_prefix(c, toks[:48], states=(16, 32))  # KV for 48 tokens, states at 16 and 32
    hit = c.find_longest_cache_hit(chain_hashes(toks, U), 63)
    assert hit.junction_len == 48  # the KV group alone matched 48 tokens
    assert hit.state_len == 32 and hit.state_node.state == 1101  # the state group shrank it to 32
    assert hit.kv_pages == list(range(100, 108)), "the KV of exactly the hit, not of the KV match"
    assert hit.state_block_table(B) == [None, 1101], "logical table: a null block, then the state"
    # the state group never hits beyond the KV group: drop the KV past 16 tokens -> hit 16
    c2, _ = make()
    cache_prefix(c2, toks[:16], states=(16,))
    hs2 = chain_hashes(toks, U)
    assert c2.insert_state(hs2, 32, 7) is False, "no KV cached at 32: a state there cannot be taken"
    assert c2.find_longest_cache_hit(hs2, 63).state_len == 16
    assert hs[:4] == hs2[:4]


def test_hit_respects_max_len_and_block_alignment():
    c, _ = make()
    toks = list(range(64))
    cache_prefix(c, toks, states=(16, 32, 48, 64))
    hs = chain_hashes(toks, U)
    assert c.find_longest_cache_hit(hs, 63).state_len == 48, "the last token is never reused"
    assert c.find_longest_cache_hit(hs, 40).state_len == 32
    with pytest.raises(ValueError, match="block_size"):
        c.insert_state(hs, 20, 5)  # 20 is a unit boundary, not a block boundary, and partial hits are off


def test_partial_hit_at_a_unit_boundary():
    c, _ = make(partial=True)
    toks = list(range(64))
    hs = cache_prefix(c, toks[:40], states=(16, 36))
    hit = c.find_longest_cache_hit(chain_hashes(toks, U), 63)
    assert hit.state_len == 36 and hit.state_len % B, "a state inside a block is a partial hit"
    assert hit.state_block_table(B) == [None, None, 1101]
    c_off, _ = make(partial=False)
    cache_prefix(c_off, toks[:40], states=(16,))
    assert c_off.find_longest_cache_hit(hs, 63).state_len == 16


def test_retention_masks():
    bounds = [64, 128, 192, 256, 320, 384]
    assert retention_mask(bounds, None) == [True] * 6
    assert retention_mask(bounds, 128) == [False, True, False, True, False, True]
    assert retention_mask(bounds, 128, reachable={192}) == [False, True, True, True, False, True]
    assert retention_mask(bounds, 0) == [False] * 6
    assert retention_mask(bounds, 0, reachable={64, 384}) == [True, False, False, False, False, True]


def test_locked_kv_is_never_evicted_and_locks_balance():
    c, f = make()
    toks = list(range(32))
    hs = cache_prefix(c, toks, states=(16, 32))
    node = c.node_at(hs, 32)
    c.lock(node)
    while c.evict_one():
        pass
    assert f.states == [1100, 1101], "states go even on a locked path (they are copied at admission)"
    assert f.kv == [] and c.num_kv_pages() == 8, "locked KV stays"
    c.lock(node, -1)
    c.flush()
    assert sorted(f.kv) == list(range(100, 108)) and c.num_kv_pages() == 0
    with pytest.raises(RuntimeError, match="negative"):
        c.lock(node, -1)


def test_lru_evicts_the_least_recently_used_tail_first():
    c, f = make()
    a = cache_prefix(c, [1] * 16, 100, states=(16,))
    b = cache_prefix(c, [2] * 16, 200, states=(16,))
    c.touch(c.node_at(a, 16))  # a is now the most recent
    c.evict_one()
    assert f.states == [1200], "b's state is older"
    assert f.kv == [203], "an unlocked leaf goes with its KV page"
    assert c.find_longest_cache_hit(a, 16).state_len == 16
    c.evict_one()  # then b's next leaf: KV is evicted tail first, so the chain stays consistent
    assert f.kv == [203, 202] and f.states == [1200]


def test_marconi_prefers_states_that_save_more_flops_per_byte():
    cost = CostModel(ModelConfig.kimi_linear_48b())
    c, f = make("marconi", alpha=1.0, cost=cost)
    # the same age; one state saves 16 tokens of prefill over its parent state, the other 4 * 16
    short = cache_prefix(c, [1] * 64, 100, states=(48, 64))
    long_ = cache_prefix(c, [2] * 64, 200, states=(64,))
    c.clock += 1000  # everything is old: recency barely differs
    c.evict_one()
    assert f.states == [1101], "the state 16 tokens past its parent saves least per byte"
    assert c.find_longest_cache_hit(long_, 64).state_len == 64
    assert c.find_longest_cache_hit(short, 64).state_len == 48


def test_marconi_protects_branch_points_and_alpha_zero_is_recency():
    cost = CostModel(ModelConfig.kimi_linear_48b())
    c, f = make("marconi", alpha=1.0, cost=cost)
    base = [5] * 16
    cache_prefix(c, base + [1] * 16, 100, states=(16, 32))
    hs2 = cache_prefix(c, base + [2] * 16, 200)
    c.insert_state(hs2, 32, 77)
    junction = c.node_at(hs2, 16)
    assert len(junction.children) == 2 and junction.state is not None
    assert junction not in c._candidates(), "a branch point (two children) is not a Marconi candidate"
    c0, f0 = make("marconi", alpha=0.0, cost=cost)
    old = cache_prefix(c0, [1] * 64, 100, states=(64,))  # saves a lot, but older
    cache_prefix(c0, [2] * 16, 200, states=(16,))
    c0.evict_one()
    assert f0.states == [1100], "alpha = 0: recency only, the older state goes first"
    assert c0.find_longest_cache_hit(old, 64).state_len == 0


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="block_size"):
        BlockHashTable(10, 4, free_kv=print, free_state=print)
    with pytest.raises(ValueError, match="hash_unit"):
        BlockHashTable(16, 0, free_kv=print, free_state=print)
    with pytest.raises(ValueError, match="eviction"):
        BlockHashTable(16, 4, free_kv=print, free_state=print, eviction="fifo")
    with pytest.raises(ValueError, match="cost"):
        BlockHashTable(16, 4, free_kv=print, free_state=print, eviction="marconi")
    with pytest.raises(ValueError, match="alpha"):
        BlockHashTable(16, 4, free_kv=print, free_state=print, alpha=-1)


def test_cost_model_arithmetic():
    cm = CostModel(ModelConfig.kimi_linear_48b())
    assert cm.state_bytes == 20 * (32 * 128 * 128 * 4 + 3 * 4096 * 3 * 2)  # 41.4 MiB, fp32 state + bf16 conv
    assert cm.kv_bytes_per_token == 7 * 576 * 2 == 8064
    # linear in the token count except MLA attention: doubling the span more than doubles the FLOPs
    one, two = cm.prefill_flops(0, 4096), cm.prefill_flops(0, 8192)
    assert 2 * one < two < 2.2 * one
    assert cm.prefill_flops(0, 100) == cm.prefill_flops(0, 60) + cm.prefill_flops(60, 100)
    assert cm.prefill_flops(10, 10) == 0
    assert cm.prefill_seconds(0, 1000, restored_states=1) > cm.prefill_seconds(0, 1000)


def test_lru_skips_stale_entries_of_a_reinserted_prefix():
    """Evict a prefix, cache the same tokens again (new nodes, same hashes): the old heap entries
    must not evict the new nodes through the old ones."""
    c, f = make()
    toks = [3] * 32
    cache_prefix(c, toks, 100, states=(16,))
    c.flush()
    hs = cache_prefix(c, toks, 200, states=(32,))
    c.check()
    while c.evict_one():
        c.check()
    assert sorted(f.kv) == list(range(100, 108)) + list(range(200, 208))
    assert c.num_kv_pages() == 0 and c.find_longest_cache_hit(hs, 32).state_len == 0
