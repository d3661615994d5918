"""The KDA-aware radix tree: back-off to states, tombstones, branching points, locks, eviction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kda_ref.cache import RadixTree


class Pools:
    """Stand-in pools recording what the tree frees (double frees are errors)."""

    def __init__(self):
        self.freed_kv: list[int] = []
        self.freed_states: list[int] = []
        self.next_kv = 1000
        self.next_state = 1

    def kv(self, n):
        ids = list(range(self.next_kv, self.next_kv + n))
        self.next_kv += n
        return ids

    def state(self):
        self.next_state += 1
        return self.next_state - 1

    def free_kv(self, ids):
        assert not set(ids) & set(self.freed_kv), "double free of KV"
        self.freed_kv.extend(ids)

    def free_state(self, s):
        assert s not in self.freed_states, "double free of a state"
        self.freed_states.append(s)


def tree(chunk=4):
    p = Pools()
    return RadixTree(p.free_kv, p.free_state, chunk_size=chunk), p


def test_any_kv_prefix_matches_but_only_saved_states_are_usable():
    t, p = tree()
    toks = list(range(10))
    s = p.state()
    t.insert(toks, p.kv(10), s)
    m = t.match_prefix(toks[:7] + [99])  # a strict prefix then a divergence
    assert m.kv_len == 7  # plain prefix cache: 7 tokens of KV
    assert m.state_len == 0 and m.state_slot is None  # but no state at 7: back off to the root
    assert m.branching_len == 4  # last chunk-aligned position without a state: checkpoint it next
    m = t.match_prefix(toks + [5, 6])
    assert m.kv_len == 10 and m.state_len == 10 and m.state_slot == s
    t.check()


def test_split_never_invents_a_state():
    t, p = tree()
    t.insert([1, 2, 3, 4, 5, 6], p.kv(6), p.state())
    t.insert([1, 2, 3, 7, 8], p.kv(5), p.state())
    upper = t.root.children[1]
    assert upper.key == [1, 2, 3] and upper.state is None and len(upper.children) == 2
    t.check()
    print(t.pretty())


def test_insert_reports_duplicates_and_existing_state():
    t, p = tree()
    first = p.state()
    t.insert([1, 2, 3], p.kv(3), first)
    existing, taken = t.insert([1, 2, 3], p.kv(3), p.state())
    assert existing == 3 and not taken  # caller frees its duplicate KV and its state
    existing, taken = t.insert([1, 2, 3, 4], p.kv(4), p.state())
    assert existing == 3 and taken
    assert t.match_prefix([1, 2, 3, 4]).state_len == 4


def test_state_eviction_tombstones_internal_nodes_and_deletes_leaves():
    t, p = tree()
    s_mid, s_a, s_b = p.state(), p.state(), p.state()
    t.insert([1, 2, 3], p.kv(3), s_mid)
    t.insert([1, 2, 3, 4, 5], p.kv(5), s_a)
    t.insert([1, 2, 3, 6], p.kv(4), s_b)
    t.match_prefix([1, 2, 3, 4, 5])  # refresh s_a; s_mid and s_b are older
    assert t.evict_states(1) == 1
    assert p.freed_states == [s_mid]  # internal: tombstone, KV kept
    assert t.match_prefix([1, 2, 3]).kv_len == 3 and t.match_prefix([1, 2, 3]).state_len == 0
    assert t.evict_states(1) == 1 and p.freed_states[-1] == s_b  # leaf: deleted with its KV
    assert t.match_prefix([1, 2, 3, 6]).kv_len == 3
    t.check()


def test_eviction_reads_its_candidates_not_every_node(monkeypatch):
    """A long run keeps its speed: eviction reads the holders (least recent first) and the leaves the tree keeps as
    it changes, not a walk of every node -- which grows with the KV budget, tombstones included. A 40-token trunk
    with a state every chunk, forty leaves under it, then the first leaf used again: least recent first, the
    trunk's first nine states go (tombstones; each leaf's insert used the tenth, at the trunk's end), then the
    oldest leaves with their KV."""
    t, p = tree()
    trunk = list(range(40))
    trunk_states = [p.state() for _ in range(10)]
    for i, s in enumerate(trunk_states):  # a state every chunk along the trunk
        t.insert(trunk[:4 * i + 4], p.kv(4 * i + 4), s)
    leaves = [p.state() for _ in range(40)]
    for j, s in enumerate(leaves):
        t.insert(trunk + [100 + j], p.kv(41), s)
    t.match_prefix(trunk + [100])  # the first leaf becomes the most recent
    monkeypatch.setattr(t, "nodes", lambda: pytest.fail("eviction walked every node"))
    assert t.evict_states(10) == 10 and p.freed_states == trunk_states[:9] + leaves[1:2]
    assert t.evict_states(3) == 3 and p.freed_states[10:] == leaves[2:5]
    assert t.evict_kv(1) == 1 and p.freed_states[-1] == leaves[5]  # the least recently read leaf
    monkeypatch.undo()
    t.check()


def test_cascade_deletes_tombstone_leaves():
    t, p = tree()
    t.insert([1, 2, 3, 4], p.kv(4), p.state())
    t.insert([1, 2, 9], p.kv(3), p.state())  # split: [1,2] tombstone with two children
    t.evict_states(2)
    assert t.num_kv_tokens() == 0 and t.root.is_leaf  # the tombstone [1,2] went with its last child
    # the first insert's 4 units and the [9] leaf's unit; 1004, 1005 (the second insert's copy of
    # [1, 2]) were duplicates that stay the caller's to free
    assert sorted(p.freed_kv) == [1000, 1001, 1002, 1003, 1006]
    t.check()


def test_a_node_left_a_tombstone_leaf_under_a_lock_goes_when_the_lock_does():
    """Eviction takes the state of a locked internal node (its KV stays, a running request reads it), then
    deletes the unlocked leaf below it: the node is a leaf without a state, kept while locked. Releasing
    the lock left it in the tree for good -- KV nothing could restore from, a broken invariant."""
    t, p = tree()
    t.insert([1, 2, 3, 4], p.kv(4), p.state())
    t.insert([1, 2, 3, 4, 5, 6, 7, 8], p.kv(8), p.state())
    node = t.match_prefix([1, 2, 3, 4, 99]).state_node
    t.match_prefix([1, 2, 3, 4, 5, 6, 7, 8, 99])  # the child is the more recent: the node's state goes first
    t.inc_lock(node)  # a request admitted from the node holds its path
    assert t.evict_states(10) == 2 and node.is_leaf and node.state is None
    t.check()  # locked: its KV is the request's prefix
    assert t.num_kv_tokens() == 4
    t.dec_lock(node)
    assert t.num_kv_tokens() == 0 and t.root.is_leaf and sorted(p.freed_kv)[:4] == [1000, 1001, 1002, 1003]
    t.check()


def test_locked_entries_are_never_evicted():
    t, p = tree()
    s = p.state()
    t.insert([1, 2, 3, 4], p.kv(4), s)
    node = t.match_prefix([1, 2, 3, 4]).state_node
    t.inc_lock(node, state=True)
    assert t.evict_states(5) == 0 and t.evict_kv(100) == 0
    t.dec_lock(node, state=True)
    with pytest.raises(ValueError, match="^node:"):
        t.dec_lock(node, state=True)  # never negative
    assert t.evict_kv(1) == 4 and s in p.freed_states
    t.check()


def test_kv_lock_covers_the_path_but_state_lock_only_the_node():
    t, p = tree()
    s_mid = p.state()
    t.insert([1, 2], p.kv(2), s_mid)
    t.insert([1, 2, 3, 4], p.kv(4), p.state())
    leaf = t.match_prefix([1, 2, 3, 4]).state_node
    t.inc_lock(leaf, state=True)
    assert t.evict_states(5) == 1 and p.freed_states == [s_mid]  # the ancestor's state may go
    assert t.match_prefix([1, 2, 3, 4]).kv_len == 4  # its KV may not (path lock)
    t.check()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=12),
       st.lists(st.tuples(st.sampled_from(["kv", "state"]), st.integers(1, 6)), max_size=6))
def test_random_inserts_and_evictions_keep_invariants_and_free_everything_once(seqs, evictions):
    t, p = tree(chunk=2)
    allocated_kv, allocated_states = set(), set()
    for s in seqs:
        kv, st_ = p.kv(len(s)), p.state()
        allocated_kv |= set(kv)
        allocated_states.add(st_)
        existing, taken = t.insert(s, kv, st_)
        p.free_kv(kv[:existing])  # the caller's duplicates
        if not taken:
            p.free_state(st_)
        m = t.match_prefix(s)
        assert m.kv_len == len(s) and m.state_len == len(s)
        t.check()
    for kind, n in evictions:
        (t.evict_kv if kind == "kv" else t.evict_states)(n)
        t.check()
    t.evict_kv(10**9)
    assert t.num_kv_tokens() == 0 and t.root.is_leaf
    assert sorted(p.freed_kv) == sorted(allocated_kv)  # every KV unit freed exactly once
    assert sorted(p.freed_states) == sorted(allocated_states)
