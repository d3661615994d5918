"""Tree drafts (:mod:`kda_ref.speculative.tree`, :mod:`kda_ref.engine.tree_verify`): several candidates per
position, each node's KDA state its parent's stepped by its token, the accepted branch committed;
outputs equal plain decoding's; rejection sampling over candidates keeps the target distribution."""

from __future__ import annotations

import pytest
import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.engine.tree_verify import run_tree
from kda_ref.speculative import NgramDrafter
from kda_ref.speculative.tree import DraftTree, accept_tree, ngram_tree
from kda_ref.trace import TraceRecorder

PARAMS = SamplingParams(max_tokens=48, ignore_eos=True, return_logits=True)


def test_chains_merge_into_a_breadth_first_trie():
    tree = DraftTree.from_chains([[5, 6, 7], [5, 8], [9]])
    assert tree.tokens == [5, 9, 6, 8, 7] and tree.parents == [-1, -1, 0, 0, 2] and tree.depths == [1, 1, 2, 2, 3]
    assert tree.children(-1) == [0, 1] and tree.children(0) == [2, 3] and tree.path(4) == [0, 2, 4]
    assert tree.depth == 3 and [i for i, d in enumerate(tree.depths) if d == 2] == [2, 3]
    assert len(DraftTree.from_chains([])) == 0


def test_ngram_tree_keeps_distinct_continuations_of_the_suffix():
    toks = [1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2]
    tree = ngram_tree(toks, k=2, width=3, min_n=1, max_n=2)
    assert sorted(tree.tokens[i] for i in tree.children(-1)) == [3, 4, 5]  # three earlier continuations of [1, 2]
    assert tree.children(-1)[0] == 0 and tree.tokens[0] == 5  # the most recent first
    one = ngram_tree(toks, k=2, width=1, min_n=1, max_n=2)
    assert one.tokens == [5, 1]  # width 1 is the chain prompt lookup proposes


@pytest.mark.parametrize("min_n,max_n,vocab", [(1, 2, 3), (1, 4, 2), (2, 5, 3)])
def test_the_drafters_indexed_tree_is_the_reference_scans(min_n, max_n, vocab):
    """``NgramDrafter.propose_tree`` (through the request's index) gives :func:`ngram_tree`'s tree at
    every length of a growing sequence, for several widths and depths."""
    g = torch.Generator().manual_seed(vocab * 10 + max_n)
    d = NgramDrafter(min_n, max_n)
    toks: list[int] = []
    for step in range(120):
        toks = toks + torch.randint(0, vocab, (1 + step % 3,), generator=g).tolist()
        k, width = 1 + step % 4, 1 + step % 5
        got, want = d.propose_tree(0, toks, k, width), ngram_tree(toks, k, width, min_n, max_n)
        assert (got.tokens, got.parents, got.depths) == (want.tokens, want.parents, want.depths)


def test_greedy_acceptance_follows_the_branch_the_target_takes():
    tree = DraftTree.from_chains([[3, 4], [2, 1]])  # nodes: 3, 2, 4, 1
    V = 6
    root = torch.zeros(V)
    root[2] = 5.0  # the target takes 2 after the root
    nodes = torch.zeros(len(tree), V)
    nodes[1, 1] = 5.0  # after 2 it takes 1 (accepted), then after 1 it takes 4
    nodes[3, 4] = 5.0
    res = accept_tree(root, nodes, tree, 0.0, 0, None)
    assert res.path == [1, 3] and res.next_token == 4
    root[2], root[0] = 0.0, 5.0  # no child matches: nothing accepted, the target's own token
    assert accept_tree(root, nodes, tree, 0.0, 0, None).path == []


def test_rejection_sampling_over_candidates_keeps_the_target_distribution():
    """Chi-square (4 degrees of freedom): the first emitted token is distributed as the target's p,
    whichever candidates the tree offers (here 1 and 3, tried in that order)."""
    p = torch.tensor([0.1, 0.35, 0.05, 0.3, 0.2])
    logits = p.log()
    tree = DraftTree.from_chains([[1], [3]])
    gen = torch.Generator().manual_seed(0)
    n = 20000
    counts = torch.zeros(5)
    for _ in range(n):
        res = accept_tree(logits, torch.zeros(2, 5), tree, 1.0, 0, gen)
        first = tree.tokens[res.path[0]] if res.path else res.next_token
        counts[first] += 1
    chi2 = float(((counts - n * p) ** 2 / (n * p)).sum())
    assert chi2 < 18.5  # p = 0.001 critical value for 4 degrees of freedom


@pytest.fixture(scope="module")
def trained():
    from kda_ref.train import load_trained

    return load_trained()


def _docs_prompts():
    import pathlib

    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "kda.md").read_text(encoding="utf-8")
    return [text[:300], text[1000:1200]]  # the trained model recites, and repeats itself: recurring phrases


@pytest.mark.parametrize("width,k,prefix_cache", [(2, 3, "none"), (3, 1, "none"), (3, 3, "radix"),
                                                  (2, 3, "block")])
def test_tree_speculation_gives_plain_decodings_tokens_and_logits(trained, width, k, prefix_cache):
    prompts = _docs_prompts()
    want = LLM(trained, prefix_cache=prefix_cache).generate(prompts, PARAMS, use_tqdm=False)
    tracer = TraceRecorder()
    llm = LLM(trained, prefix_cache=prefix_cache, speculative="ngram", num_speculative_tokens=k,
              spec_tree_width=width, tracer=tracer)
    got = llm.generate(prompts, PARAMS, use_tqdm=False)
    for a, b in zip(want, got):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(b.logits, a.logits, atol=1e-4, rtol=0)
    s = llm.stats()
    assert s["spec_verify_steps"] > 0 and s["spec_draft_tokens"] > s["spec_verify_steps"]  # trees, not chains
    events = [e for e in tracer.events if e.kind == "spec_verify"]
    assert events and all(e.tree_parents is not None for e in events)
    assert any(len(set(e.tree_parents)) < len(e.tree_parents) for e in events)  # a node with several children
    assert any(e.accepted_path for e in events)
    _check_tree_steps_count_their_nodes(tracer.events, events)
    if prefix_cache == "none":
        assert llm.pool.is_empty()  # every page came back


def _check_tree_steps_count_their_nodes(events, verifies):
    """In the trace, a tree item's batch segment is its root and every node (they ran in a forward of its own,
    listed in ``own_forwards``), so the batch, the scheduler's count and each KDA layer's dispatches agree."""
    by_step = lambda kind: {e.step: e for e in events if e.kind == kind}  # noqa: E731
    batches, decisions = by_step("batch_composition"), by_step("schedule_decision")
    for v in verifies:
        b = batches[v.step]
        n = b.req_ids.index(v.req_id)
        assert b.cu_seqlens[n + 1] - b.cu_seqlens[n] == 1 + len(v.drafts)
        assert n in b.own_forwards
        assert decisions[v.step].tokens_scheduled == b.num_tokens
        layer = min(e.layer for e in events if e.kind == "kernel_dispatch")
        ran = sum(e.num_tokens for e in events if e.kind == "kernel_dispatch" and e.step == v.step and e.layer == layer)
        assert ran == b.num_tokens


def test_every_node_holds_the_state_and_kv_after_its_own_branch():
    """One forward verifies the root and every node: siblings start from the same state and never see each
    other, so each node's state, conv window and KV rows equal a plain prefill of the prompt, the root and
    that node's branch; the root's are those after the root; the request's committed state is untouched."""
    cfg = ModelConfig.micro()
    llm = LLM(cfg, seed=0)
    prompt = list(range(3, 33))
    rid = llm.add_request(prompt, SamplingParams(max_tokens=8, ignore_eos=True))
    llm.step()  # prefill; the first token sampled
    req = llm.request(rid)
    root_tok = req.output_token_ids[-1]
    tree = DraftTree.from_chains([[11, 12, 15, 16], [13], [11, 14]])  # deeper than the conv's reach on one branch
    llm.scheduler.memory.grow_pages(req, req.num_computed_tokens + 1 + len(tree))
    t, ps = llm.pool.tensors, llm.pool.tensors.page_size
    committed = (t.recurrent[:, req.slot].clone(), t.conv[:, req.slot].clone())
    with torch.no_grad():
        step = run_tree(llm.model, llm.pool, req, tree)

    def after(tokens):
        """The state, conv window and KV rows a plain engine holds after ``tokens``."""
        ref, seen = LLM(cfg, seed=0), {}

        def grab(r):
            seen["rec"] = ref.pool.tensors.recurrent[:, r.slot].clone()
            seen["conv"] = ref.pool.tensors.conv[:, r.slot].clone()
            pos = torch.arange(r.num_computed_tokens)
            seen["kv"] = ref.pool.tensors.kv[:, torch.tensor(r.pages)[pos // ps], pos % ps].clone()

        ref.add_finish_listener(grab)
        ref.generate([tokens], SamplingParams(max_tokens=1), use_tqdm=False)
        return seen

    for i in [-1, *range(len(tree))]:  # -1: the root
        branch = [] if i < 0 else [tree.tokens[j] for j in tree.path(i)]
        seen = after(prompt + [root_tok] + branch)
        rec, conv = step.node_state(llm.pool, i)
        torch.testing.assert_close(rec, seen["rec"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(conv, seen["conv"], atol=1e-5, rtol=1e-5)
        if i >= 0:
            torch.testing.assert_close(step.node_kv(llm.pool, i), seen["kv"][:, -len(branch):], atol=1e-5, rtol=1e-5)
    assert torch.equal(t.recurrent[:, req.slot], committed[0]) and torch.equal(t.conv[:, req.slot], committed[1])
    # the commit: the state after the last kept node into the slot, the kept branch's KV to its positions
    from kda_ref.speculative.tree import TreeAccept

    node = tree.path(len(tree) - 1)  # a branch whose nodes are not the first children: its KV rows move
    step.result = TreeAccept(path=tree.path(node[-1]), next_token=1)
    step.commit(llm.pool, req, kept=1 + len(step.result.path))
    seen = after(prompt + [root_tok] + [tree.tokens[j] for j in step.result.path])
    torch.testing.assert_close(t.recurrent[:, req.slot], seen["rec"], atol=1e-5, rtol=1e-5)
    pos = torch.arange(req.num_computed_tokens + 1 + len(step.result.path))
    kv = t.kv[:, torch.tensor(req.pages)[pos // ps], pos % ps]
    torch.testing.assert_close(kv[:, req.num_computed_tokens:], seen["kv"][:, req.num_computed_tokens:], atol=1e-5, rtol=1e-5)


def test_the_tree_layout_follows_each_tokens_branch():
    """Token 0 is the root, token 1 + i node i; a token's conv reads its own branch, oldest first, then the
    committed window past the root (its rows 0 .. W-2 in ``cat(window, inputs)``); it attends to its
    ancestors and itself only."""
    from kda_ref.engine.tree_verify import tree_layout

    tree = DraftTree(tokens=[5, 6, 7, 8], parents=[-1, -1, 0, 2], depths=[1, 1, 2, 3])  # 0 -> 2 -> 3; 1
    parents, conv_index, visible = tree_layout(tree, width=4)  # W - 1 = 3 committed rows: 0, 1, 2
    assert parents == (-1, 0, 0, 1, 3)
    # rows of cat(window, inputs): window 0..2, the root 3, node i at 4 + i
    assert conv_index.tolist() == [[0, 1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 5], [2, 3, 4, 6], [3, 4, 6, 7]]
    assert visible.tolist() == [[True, False, False, False, False], [True, True, False, False, False],
                                [True, False, True, False, False], [True, True, False, True, False],
                                [True, True, False, True, True]]


@pytest.mark.parametrize("kw,match", [
    (dict(speculative="ngram", spec_state="replay", spec_tree_width=2), "per_step"),
    (dict(speculative="ngram", spec_state="slots", spec_tree_width=2), "per_step"),
    (dict(speculative="ngram", spec_tree_width=0), "spec_tree_width"),
    (dict(speculative="ngram", spec_tree_width=9), "spec_tree_width"),
    (dict(spec_tree_width=2), "spec_tree_width: given without speculative"),
    (dict(speculative="draft", draft_model=ModelConfig.micro(), spec_tree_width=2), "n-gram"),
])
def test_bad_tree_parameters_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        LLM(ModelConfig.micro(), **kw)


def test_a_tree_step_reserves_pages_for_every_node_and_a_failed_tree_fails_its_request_alone(trained, monkeypatch):
    """The scheduler reserves pages for the root and every node (their KV rows lie after the root's) and
    frees those past the kept tokens after the step; a tree verify that raises fails its request only."""
    from kda_ref.engine import runner

    prompts = _docs_prompts()
    want = LLM(trained).generate(prompts, PARAMS, use_tqdm=False)
    llm = LLM(trained, speculative="ngram", spec_tree_width=2)
    ids = [llm.add_request(p, PARAMS) for p in prompts]
    real, reserved = runner.run_tree, []

    def run_tree(model, pool, req, tree, on_dispatch=None):
        reserved.append(len(req.pages) * pool.tensors.page_size >= req.num_computed_tokens + 1 + len(tree))
        if req.req_id == ids[1] and len(reserved) > 3:
            raise RuntimeError("injected")
        return real(model, pool, req, tree, on_dispatch)

    monkeypatch.setattr(runner, "run_tree", run_tree)
    done = []
    while llm.has_unfinished():
        done += llm.step()
        for r in llm.scheduler.running:  # the pages past the kept tokens went back
            assert len(r.pages) == llm.scheduler.pages_for(r.num_computed_tokens)
    assert reserved and all(reserved)
    by_id = {o.req_id: o for o in done}
    assert by_id[ids[0]].token_ids == want[0].token_ids
    assert by_id[ids[1]].finish_reason == "error" and "injected" in by_id[ids[1]].error
    assert llm.pool.is_empty()


def test_the_verify_recurrence_follows_parent_indices():
    """``recurrent_kda_verify(parents=...)``: a chain's parents give the chain's result bit for bit; in a
    tree every token's state is its parent's stepped by the token -- the chain of its own branch; a parent
    at or after its token is refused."""
    from kda_ref.ops import l2norm
    from kda_ref.ops.kda_recurrent import recurrent_kda_verify

    g = torch.Generator().manual_seed(0)
    N, L, H, K = 2, 5, 2, 16
    q, k = (l2norm(torch.randn(N, L, H, K, generator=g)) for _ in range(2))
    v, gg, b = torch.randn(N, L, H, K, generator=g), -torch.rand(N, L, H, K, generator=g), torch.rand(N, L, H, generator=g)
    S0 = torch.randn(N, H, K, K, generator=g)
    o, steps = recurrent_kda_verify(q, k, v, gg, b, S0)
    o2, steps2 = recurrent_kda_verify(q, k, v, gg, b, S0, parents=(-1, 0, 1, 2, 3))
    assert torch.equal(o, o2) and torch.equal(steps, steps2)
    parents = (-1, 0, 0, 2, 1)  # branches 0-1-4 and 0-2-3
    o3, steps3 = recurrent_kda_verify(q, k, v, gg, b, S0, parents=parents)
    for branch in ([0, 1, 4], [0, 2, 3]):
        idx = torch.tensor(branch)
        ob, sb = recurrent_kda_verify(q[:, idx], k[:, idx], v[:, idx], gg[:, idx], b[:, idx], S0)
        torch.testing.assert_close(steps3[:, idx], sb, rtol=0, atol=1e-6)
        torch.testing.assert_close(o3[:, idx], ob, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="parents"):
        recurrent_kda_verify(q, k, v, gg, b, S0, parents=(-1, 1, 0, 2, 3))
