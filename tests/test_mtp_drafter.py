"""MTP drafts (``speculative="mtp"``): the trained K3 demo's MTP layer drafts ``k`` tokens, chained, from
the target's hidden states the engine hands it after every step. The drafts against a stateless
reference chain; the engine's answers against plain greedy decoding under every rollback strategy;
the configurations it refuses."""

from __future__ import annotations

import pytest
import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.model import ForwardBatch, HybridModel
from kda_ref.speculative import SPEC_STATES
from kda_ref.speculative.mtp_drafter import MTPDrafter
from kda_ref.speculative.mtp_static import StaticDraft, contiguous_plan
from kda_ref.train import load_trained

PROMPTS = [[256, *list(b"The recurrent state of a KDA layer is a matrix per head; ")],
           [256, *list(b"# KDA in this repository\n\nThe chunk form ")]]


@pytest.fixture(scope="module")
def k3():
    return load_trained(kind="k3")


def _reference_chain(model, ids: list[int], k: int) -> list[int]:
    """The chained drafts computed statelessly: the MTP layer over every row again for each draft, the
    target's hidden states for the committed positions, the layer's own output for the drafted ones."""
    with torch.no_grad():
        h = model.hidden_states(torch.tensor(ids))
        rows, nxt, out = list(h[:-1].unbind(0)), ids[1:], []
        for _ in range(k):
            logits, x = model.mtp[0].predict(torch.stack(rows), torch.tensor(nxt),
                                             ForwardBatch.prefill([len(nxt)]), model.dispatcher)
            out.append(int(logits[-1].argmax()))
            rows.append(x[-1])
            nxt.append(out[-1])
    return out


def _handed_the_target_hidden_states(llm, model, ids):
    """Mid-run: the engine's drafter holds, for each request, the target's hidden states of exactly its
    committed positions (the stateless forward's, 1e-4). Returns the drafter."""
    drafter = llm.scheduler.speculation.drafter
    for rid in ids:
        req = llm.request(rid)
        base, rows = drafter.held_hidden(rid)
        with torch.no_grad():
            h = model.hidden_states(torch.tensor(req.all_token_ids))
        assert base == 0 and rows.shape[0] == req.num_computed_tokens
        torch.testing.assert_close(rows, h[:rows.shape[0]], atol=1e-4, rtol=1e-4)
    return drafter


def test_the_mtp_layers_fused_draft_step_is_its_reference_extend(k3):
    """The drafter's steps (rows after a cached context: one, or the same number per sequence) take the fused
    decode / verify path; they give the reference extend's logits and hidden states (1e-4) and cache the
    same rows."""
    from kda_ref.model import RequestCache

    ids = PROMPTS[1]
    with torch.no_grad():
        h = k3.hidden_states(torch.tensor(ids))
    layer, idx = k3.mtp[0], [k3.config.num_hidden_layers]
    caches = [RequestCache(k3.config, 1, max_tokens=128, mla_layers=idx) for _ in range(2)]
    for start, stop in ((0, 20), (20, 21), (21, 24), (24, 25)):  # a first extend, then draft-shaped steps
        got = []
        with torch.no_grad():  # the path the drafter's own step takes: fused after the first rows
            mode = layer.fused_mode(caches[0].batch([stop - start]), caches[0].tensors, k3.dispatcher)
        assert (mode is None) == (start == 0) and (mode is None or mode.plan.tokens == stop - start)
        for cache in caches:
            batch = cache.batch([stop - start])
            if cache is caches[1]:  # the reference: with autograd recording the layer takes the extend path
                with torch.enable_grad():
                    out = layer.predict(h[start:stop], torch.tensor(ids[start + 1:stop + 1]), batch, k3.dispatcher,
                                        cache=cache.tensors)
            else:
                with torch.no_grad():
                    out = layer.predict(h[start:stop], torch.tensor(ids[start + 1:stop + 1]), batch, k3.dispatcher,
                                        cache=cache.tensors)
            cache.advance(batch)
            got.append([t.detach() for t in out])
        for a, b in zip(*got):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(caches[0].kv_rows(0, idx[0]), caches[1].kv_rows(0, idx[0]), atol=1e-5, rtol=1e-5)


def test_a_last_only_draft_step_is_the_last_row_of_the_full_step_and_caches_every_rows_kv(k3):
    """``last_only`` (a draft's first step: the rows before the last are run for their KV alone) gives the
    full step's last row -- logits and hidden state, ``[1, ...]`` -- and caches the same KV rows, in the
    reference extend (a request's first rows) and in the fused step (rows after a cached context)."""
    from kda_ref.model import RequestCache

    ids = PROMPTS[0]
    with torch.no_grad():
        h = k3.hidden_states(torch.tensor(ids))
    layer, idx = k3.mtp[0], [k3.config.num_hidden_layers]
    full, last = (RequestCache(k3.config, 1, max_tokens=128, mla_layers=idx) for _ in range(2))
    for start, stop in ((0, 12), (12, 16), (16, 17)):
        outs = []
        for cache, last_only in ((full, False), (last, True)):
            batch = cache.batch([stop - start])
            with torch.no_grad():
                outs.append(layer.predict(h[start:stop], torch.tensor(ids[start + 1:stop + 1]), batch, k3.dispatcher,
                                          cache=cache.tensors, last_only=last_only))
            cache.advance(batch)
        (logits, x), (logits1, x1) = outs
        assert logits1.shape == (1, k3.config.vocab_size) and x1.shape == (1, k3.config.hidden_size)
        torch.testing.assert_close(logits1, logits[-1:], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(x1, x[-1:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(last.kv_rows(0, idx[0]), full.kv_rows(0, idx[0]), atol=0, rtol=0)
    with pytest.raises(ValueError, match="last_only"):  # two sequences have two last rows
        layer.predict(h[:4], torch.tensor(ids[1:5]), ForwardBatch.prefill([2, 2]), k3.dispatcher, last_only=True)


@pytest.mark.parametrize("ctx, rows", [(5, 1), (16, 1), (20, 3), (31, 2)])
def test_the_fixed_shape_plan_is_the_request_caches_plan_over_all_its_pages(k3, ctx, rows):
    """:func:`contiguous_plan`, built from ``ctx`` alone inside a compiled draft step, writes and reads the rows
    the request cache's own decode / verify plan does; the pages past those it reads are masked."""
    from dataclasses import replace

    from kda_ref.model import RequestCache

    cache = RequestCache(k3.config, 1, max_tokens=64, mla_layers=[k3.config.num_hidden_layers])
    cache.lengths[0] = ctx
    batch = cache.batch([rows])
    want = batch.decode_plan(16) if rows == 1 else replace(batch, verify=True).verify_plan(16)
    got = contiguous_plan(torch.tensor([ctx]), rows, cache.pages_per_seq, 16)
    P = want.kv_pages.shape[1]
    assert torch.equal(got.kv_write, want.kv_write) and torch.equal(got.kv_lens, want.kv_lens)
    assert torch.equal(got.kv_pages[:, :P], want.kv_pages) and got.tokens == rows
    assert torch.equal(got.kv_bias[..., :P * 16], want.kv_bias) and bool((got.kv_bias[..., P * 16:] == float("-inf")).all())
    assert torch.equal(got.kv_pad[:, :P * 16], want.kv_pad) and bool(got.kv_pad[:, P * 16:].all())


@pytest.mark.parametrize("fixed_shape", [False, True], ids=["dynamic", "fixed-shape"])
def test_the_drafts_are_the_stateless_chain_and_the_rollback_leaves_no_draft_behind(k3, fixed_shape):
    """Fed the target's hidden states, the drafter's chain is the stateless one; after the target commits
    more tokens (one of them a draft the chain had cached as a row), the next chain is again the stateless
    one for the longer sequence: the chained rows' KV was cut back. ``fixed-shape``: the draft steps run as
    the compiled engine runs them (:class:`StaticDraft`'s fixed-shape step, here eagerly)."""
    ids = PROMPTS[0]
    with torch.no_grad():
        h = k3.hidden_states(torch.tensor(ids))
    d = MTPDrafter(k3, 1024)
    if fixed_shape:
        d.static = StaticDraft(k3, compile=False)
    d.observe(7, 0, h[:-1])
    drafts = d.propose(7, ids, 4)
    assert drafts == _reference_chain(k3, ids, 4)
    assert d.kv_rows(7) == len(ids) - 1  # positions 0 .. n - 2 committed; the three chained rows cut back
    longer = ids + [drafts[0], 101]
    with torch.no_grad():
        h2 = k3.hidden_states(torch.tensor(longer))
    d.observe(7, len(ids) - 1, h2[len(ids) - 1:-1])
    assert d.propose(7, longer, 3) == _reference_chain(k3, longer, 3)
    assert d.propose(7, longer, 3) == _reference_chain(k3, longer, 3)  # asked twice without a commit
    assert d.kv_rows(7) == len(longer) - 1
    base, rows = d.held_hidden(7)
    # what it was handed, kept as handed: h's rows then h2's (a forward over the longer sequence repeats h's
    # rows only up to matmul blocking, which follows the thread count another test may have set)
    assert base == 0 and torch.equal(rows, torch.cat([h[:len(ids) - 1], h2[len(ids) - 1:-1]]))
    assert d.propose(8, ids, 2) == []  # a request it was handed nothing for drafts nothing
    if fixed_shape:  # every chain took the fixed shape: the prompt's first (its last row; the rows before it run
        # once for their KV), after a commit (2 new rows), asked again (1 row)
        assert {(rows, k) for rows, _, k in d.static.shapes} == {(1, 4), (2, 3), (1, 3)}
    d.release(7)
    assert d.held_hidden(7) is None


def test_the_fixed_shape_first_chain_caches_the_eager_drafters_rows(k3):
    """A prompt's first chain in the fixed-shape drafter (its rows but the last run once eagerly for their KV,
    the last row and the drafts as the fixed-shape step) leaves the MTP layer's cache the eager drafter's:
    every committed row's KV, each row written with the token after it (1e-4). The demo's argmax drafts
    alone would not tell: they survive a wrong KV row."""
    ids = PROMPTS[1]
    with torch.no_grad():
        h = k3.hidden_states(torch.tensor(ids))
    drafters = [MTPDrafter(k3, 1024), MTPDrafter(k3, 1024)]
    drafters[1].static = StaticDraft(k3, compile=False)
    for d in drafters:
        d.observe(5, 0, h[:-1])
        assert d.propose(5, ids, 3) == _reference_chain(k3, ids, 3) and d.kv_rows(5) == len(ids) - 1
    assert {(rows, k) for rows, _, k in drafters[1].static.shapes} == {(1, 3)}  # the fixed-shape path ran
    layer = k3.config.num_hidden_layers
    eager, fixed = (d._reqs[5].cache.kv_rows(0, layer) for d in drafters)
    torch.testing.assert_close(fixed, eager, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("fixed_shape", [False, True])
def test_a_request_that_outgrows_its_mtp_cache_drafts_the_stateless_chain(k3, fixed_shape):
    """A request's MTP cache holds a power of two of pages around what it was first handed; drafting past
    it moves the rows into the next power of two (the rows computed again) and the drafts stay the
    stateless chain's, before and after."""
    text = b"The recurrent state of a KDA layer is a matrix per head, updated by a delta rule. " * 3
    ids = [256, *list(text)][:150]
    with torch.no_grad():
        h = k3.hidden_states(torch.tensor(ids))
    d = MTPDrafter(k3, 1024, k=2)
    if fixed_shape:
        d.static = StaticDraft(k3, compile=False)
    n, seen, sizes = 60, 0, set()
    while n <= len(ids):
        d.observe(3, seen, h[seen:n - 1])
        seen = n - 1
        assert d.propose(3, ids[:n], 2) == _reference_chain(k3, ids[:n], 2), n
        sizes.add(d.capacity(3))
        n += 15
    assert sorted(sizes) == [128, 256]  # 59 rows + 64 of room: 8 pages; outgrown at 135 tokens


@pytest.mark.parametrize("state", [pytest.param(s, marks=() if i % 2 == 0 else pytest.mark.slow)
                                   for i, s in enumerate(SPEC_STATES)])
def test_mtp_speculation_keeps_plain_decodings_answers(k3, state):
    """Every rollback strategy: the MTP drafts are verified, some accepted and some not, and the answers are
    plain greedy decoding's; while the requests run the drafter holds exactly the target's hidden states of
    their committed positions."""
    params = SamplingParams(max_tokens=24, ignore_eos=True, return_logits=True)
    want = LLM(k3).generate(PROMPTS, params)
    llm = LLM(k3, speculative="mtp", num_speculative_tokens=3, spec_state=state)
    ids = [llm.add_request(p, params) for p in PROMPTS]
    for _ in range(4):
        llm.step()
    drafter = _handed_the_target_hidden_states(llm, k3, ids)
    outs = {}
    while llm.has_unfinished():
        for o in llm.step():
            outs[o.req_id] = o
    for rid, w in zip(ids, want):
        assert outs[rid].token_ids == w.token_ids
        torch.testing.assert_close(outs[rid].logits, w.logits, atol=1e-4, rtol=0)
    s = llm.stats()
    assert 0 < s["spec_accepted_tokens"] < s["spec_draft_tokens"]
    assert llm.pool.is_empty() and all(drafter.held_hidden(r) is None for r in ids)


def test_mtp_with_a_prefix_cache_hit_drafts_from_what_it_was_handed(k3):
    """A second request restored from the radix cache skips its cached prefix, so the drafter is handed
    hidden rows from the restore point on only: it drafts from those, and the answers stay plain."""
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    first = PROMPTS[0] + list(b"every token writes it and the next one reads it back, chunk by chunk")  # > 64
    follow = first + list(b"; the chunk form writes it every 64 tokens")
    want = LLM(k3).generate([first, follow], params)
    llm = LLM(k3, speculative="mtp", num_speculative_tokens=2, prefix_cache="radix")
    assert llm.generate([first], params)[0].token_ids == want[0].token_ids
    assert llm.generate([follow], params)[0].token_ids == want[1].token_ids
    s = llm.stats()
    assert s["cached_prompt_tokens"] > 0 and s["spec_accepted_tokens"] > 0


@pytest.mark.parametrize("compile", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["static", "compiled"])
def test_mtp_drafts_from_the_static_buckets_hidden_rows(k3, compile):
    """With static decode every decode and verify step is a fixed-shape bucket, which returns the hidden rows
    too: the drafter is handed the same rows as eagerly (1e-4), drafts, and the answers are plain greedy
    decoding's."""
    if compile:
        from kda_ref.engine.static_decode import cpp_compiler

        if cpp_compiler() is None:
            pytest.skip("torch.compile needs a C++ compiler")
    params = SamplingParams(max_tokens=20, ignore_eos=True)
    prompts = PROMPTS + [[256, *list(b"MLA pages")]]  # three rows: the buckets of four carry a PAD row
    want = LLM(k3).generate(prompts, params)
    llm = LLM(k3, speculative="mtp", num_speculative_tokens=1, spec_state="recoverssm", static_decode=True,
              torch_compile=compile)
    ids = [llm.add_request(p, params) for p in prompts]
    for _ in range(5):
        llm.step()
    _handed_the_target_hidden_states(llm, k3, ids)
    outs = {}
    while llm.has_unfinished():
        for o in llm.step():
            outs[o.req_id] = o.token_ids
    assert [outs[r] for r in ids] == [w.token_ids for w in want]
    assert llm.stats()["spec_accepted_tokens"] > 0
    buckets = llm.runner.static.buckets
    assert any(key[2] == 2 and b.runs for key, b in buckets.items())  # verify buckets of 1 + k = 2 tokens ran
    if compile:
        assert any(b.compiled is not None for b in buckets.values())
        # the MTP layer's draft steps compiled too (StaticDraft: k = 1, a draft of 1 + accepted rows)
        shapes = llm.scheduler.speculation.drafter.static.shapes
        assert any(s.compiled is not None and s.steps > 2 for s in shapes.values()), shapes
    else:
        assert llm.scheduler.speculation.drafter.static is None  # drafts run dynamically without torch_compile


def test_mtp_under_preemption_and_an_abort_keeps_the_answers_and_returns_everything():
    """A pool too small for every request at once (random K3-layout weights, whose MTP drafts are mostly
    wrong): preempted requests restart and are handed their hidden rows again, the answers are plain
    greedy decoding's, an aborted request's drafter state goes with it, and the pool ends empty."""
    model = HybridModel(ModelConfig.k3_micro(), seed=0, chunk_size=16).eval()
    prompts = [[(5 * i + n) % 256 for i in range(n)] for n in (30, 41, 26, 52)]
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    want = LLM(model).generate(prompts, params)
    probe = LLM(model, speculative="mtp", num_speculative_tokens=2)
    sizes = probe.pool.sizes
    llm = LLM(model, speculative="mtp", num_speculative_tokens=2, max_num_seqs=4,
              memory_budget_bytes=2 * sizes.state_bytes + 7 * sizes.kv_page_bytes)
    outs = llm.generate(prompts, params, use_tqdm=False)
    assert [o.token_ids for o in outs] == [w.token_ids for w in want]
    assert llm.stats()["preemptions"] > 0 and llm.stats()["spec_verify_steps"] > 0
    rid = llm.add_request(prompts[0], params)
    for _ in range(3):
        llm.step()
    drafter = llm.scheduler.speculation.drafter
    assert drafter.held_hidden(rid) is not None and llm.abort(rid)
    assert drafter.held_hidden(rid) is None and llm.pool.is_empty()


def test_mtp_is_refused_where_it_cannot_draft():
    with pytest.raises(ValueError, match="speculative: 'mtp' drafts with the model's own MTP layer"):
        LLM(ModelConfig.micro(), speculative="mtp")
    with pytest.raises(ValueError, match="spec_tree_width"):
        LLM(ModelConfig.k3_micro(), speculative="mtp", spec_tree_width=2)
    with pytest.raises(ValueError, match="draft_model"):
        LLM(ModelConfig.k3_micro(), speculative="mtp", draft_model=HybridModel(ModelConfig.k3_micro(), seed=0))


@pytest.mark.slow
def test_a_compiled_draft_chain_drafts_what_the_eager_one_does(k3):
    """:class:`StaticDraft` compiled (its second chain of a shape compiles, later ones run the graph, which
    keeps no guards) drafts the tokens and writes the cache rows of the same step run eagerly (1e-5)."""
    from kda_ref.engine.static_decode import cpp_compiler
    from kda_ref.model import RequestCache

    if cpp_compiler() is None:
        pytest.skip("torch.compile needs a C++ compiler")
    ids = PROMPTS[0]
    with torch.no_grad():
        h = k3.hidden_states(torch.tensor(ids))
    idx = [k3.config.num_hidden_layers]
    eager, compiled = StaticDraft(k3, compile=False), StaticDraft(k3, compile=True)
    for ctx in (10, 11, 12, 20):  # the first call of the shape runs eagerly, the second compiles
        caches = []
        for draft in (eager, compiled):
            cache = RequestCache(k3.config, 1, max_tokens=64, mla_layers=idx)
            with torch.no_grad():
                k3.mtp[0].predict(h[:ctx], torch.tensor(ids[1:ctx + 1]), cache.batch([ctx]), k3.dispatcher,
                                  cache=cache.tensors)
                cache.lengths[0] = ctx
                got = draft.chain(cache.tensors, h[ctx:ctx + 2], torch.tensor(ids[ctx + 1:ctx + 3]), ctx, 3)
            caches.append((got, cache.tensors.kv.clone()))
        assert caches[0][0] == caches[1][0]
        torch.testing.assert_close(caches[0][1][:, 1:], caches[1][1][:, 1:], atol=1e-5, rtol=1e-5)
    assert any(s.compiled is not None and s.steps >= 3 for s in compiled.shapes.values())


def test_a_fixed_shape_chain_drafts_the_configured_k_and_hands_out_what_was_asked(k3):
    """Near a request's ``max_tokens`` the engine asks for fewer drafts than ``k``: the fixed-shape chain still
    drafts ``k`` (one shape per rows and pages, not one per asked count) and returns the first ones, the
    stateless chain's."""
    ids = PROMPTS[1]
    with torch.no_grad():
        h = k3.hidden_states(torch.tensor(ids))
    d = MTPDrafter(k3, 1024, k=3)
    d.static = StaticDraft(k3, compile=False)
    d.observe(3, 0, h[:-1])
    d.propose(3, ids[:-1], 3)  # the request's first rows (the reference extend)
    assert d.propose(3, ids, 1) == _reference_chain(k3, ids, 1)
    assert d.propose(3, ids, 2) == _reference_chain(k3, ids, 2)
    assert {k for _, _, k in d.static.shapes} == {3}
