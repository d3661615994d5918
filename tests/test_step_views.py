"""Every run the Lab's form can make is drawn by every view the Lab and the Live page use, on every step.

The pages draw what :meth:`model_viz.figures.step_views.TraceViews.at` returns (and nothing else), so
calling it on every step of a run covers them. A run is a configuration the Lab can produce: drafter
n-gram / draft model / MTP x every registered ``spec_state`` x prefix cache none / radix / block x static
decode x the Kimi-Linear or the K3 demo, with or without a pool too small for every request at once
(preemption), n-gram draft trees where the strategy takes them. Each step's figures must name the
step's requests; a verify step must be drawn as one (its drafts, what was kept, the rollback).

The default run draws two fixed combinations (the K3 demo with a radix cache, MTP drafts and a tight
pool; the Kimi-Linear demo with a block cache, n-gram drafts in 1 + k slots and static decode); the
hypothesis sweep over all of them is ``-m slow``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kda_ref import LLM
from kda_ref.cache.options import prefix_cache_modes
from kda_ref.speculative import SPEC_STATES
from kda_ref.speculative.config import STRATEGIES
from model_viz.figures import step_views
from model_viz.scenarios import lab
from model_viz.i18n import in_language

PROMPTS = ["The cat sat on the mat and looked at the dog for a long time.", "The cat sat on the mat. Then",
           "A dog ran away from the big cat, and the cat sat on the mat."]
K = 3  # drafts per verify
MAX_TOKENS = 10
TIGHT_KV_TOKENS = 100  # the tight pool's KV, in tokens (the default test's K3 + radix + MTP run preempts with it)


@pytest.fixture(scope="module")
def models():
    return {"trained": lab.load_model("trained"), "trained_k3": lab.load_model("trained_k3")}


def engine_args(models, model: str, drafter: str, spec_state: str, cache: str, static: bool, tight: bool,
                tree: bool) -> dict:
    """``run_lab``'s keywords for one combination; ``tight``: a pool too small for every request at once."""
    kw = dict(speculative=drafter, spec_state=spec_state, num_speculative_tokens=K, prefix_cache=cache,
              static_decode=static)
    if drafter == "draft":
        kw["draft_model"] = models["trained"]
    if tree:
        kw["spec_tree_width"] = 2
    if tight:  # three requests' states and ~100 tokens of KV: two run, and one of them is preempted as they grow
        sizes = LLM(models[model], **kw).pool.sizes
        per_request = (1 + STRATEGIES[spec_state].extra_slots(K)) * sizes.state_bytes
        pages = -(-TIGHT_KV_TOKENS // sizes.page_size)
        kw.update(memory_budget_bytes=3 * per_request + pages * sizes.kv_page_bytes, max_num_seqs=4)
    return kw


def check_every_step(run: lab.LabRun, langs=("en", "zh")) -> dict:
    """Build every view of every step in ``langs``; assert each names the step's requests. Returns counts."""
    tv = step_views.TraceViews(run.header, run.trace)
    assert tv.views and tv.cache_error is None
    seen = {"verify_steps": 0, "steps": len(tv.views)}
    for i, view in enumerate(tv.views):
        for lang in langs:
            shown = in_language(lang, tv.at, i)
            _names_the_requests(tv, view, shown, lang)
        seen["verify_steps"] += bool(view.verifies)
    return seen


def _names_the_requests(tv, view, shown, lang: str) -> None:
    b = view.batch
    rids = {f"r{r}" for r in b.req_ids}
    assert shown.step == view.step
    assert {tr.name for tr in shown.batch.data} == rids  # one batch segment per sequence
    assert all(f"r{r}" in shown.summary for r in b.req_ids)  # chunk, decode or verify: each named
    assert ("Step" if lang == "en" else "步") in shown.summary and str(view.step) in shown.summary
    kda_cells = [c for c in shown.grid.data[0].text for c in c if c]  # the grid's cells, row by row
    assert kda_cells, "the kernel grid drew no cell"
    legend = {tr.legendgroup for tr in shown.timeline.data}
    assert all(str(r) in legend or "other" in legend for r in b.req_ids)
    assert len(shown.timeline.data) <= 2 * (13 * len(tv.phases))  # bounded: own requests + "other", per phase
    assert len(shown.pool_strip.data) <= 4  # the free bar and one trace per page kind
    if "verify" in b.phases:
        assert shown.verify is not None and shown.verify_rows
        ys = set(shown.verify.data[0].y)
        assert ys == {f"r{v.req_id}" for v in view.verifies} and ys <= rids
        for v in view.verifies:
            line = f"r{v.req_id}"
            assert line in shown.summary and f"1 + {len(v.drafts)}" in shown.summary
    else:
        assert shown.verify is None


@pytest.mark.parametrize("model,drafter,spec_state,cache,static,tight", [
    ("trained_k3", "mtp", "per_step", "radix", False, True),  # the combination a newcomer met first
    ("trained", "ngram", "slots", "block", True, False),
])
def test_every_view_draws_every_step_of_a_speculative_run(models, model, drafter, spec_state, cache, static, tight):
    kw = engine_args(models, model, drafter, spec_state, cache, static, tight, tree=False)
    run = lab.run_lab(models[model], PROMPTS, lab.sampling_params(MAX_TOKENS), mode="batch", **kw)
    seen = check_every_step(run)
    assert seen["verify_steps"] > 0
    if tight:
        assert run.stats["preemptions"] > 0


def test_a_draft_trees_step_is_drawn_as_a_verify(models):
    """A tree's nodes run in a forward of their own; in the step's batch its item is the root token alone,
    and the batch still says it verifies (it said "decode" while the verify view drew the tree)."""
    kw = engine_args(models, "trained", "ngram", "per_step", "none", False, False, tree=True)
    run = lab.run_lab(models["trained"], PROMPTS, lab.sampling_params(MAX_TOKENS), mode="batch", **kw)
    assert check_every_step(run, langs=("en",))["verify_steps"] > 0
    # the batch bar counts a tree's nodes (they ran, in a forward of their own), as the grid does
    tv = step_views.TraceViews(run.header, run.trace)
    trees = [i for i, v in enumerate(tv.views) if any(x.tree_parents is not None for x in v.verifies)]
    assert trees
    for i in trees:
        view, shown = tv.views[i], in_language("en", tv.at, i)
        widths = {bar.name: bar.x[0] for bar in shown.batch.data}
        for v in view.verifies:
            assert widths[f"r{v.req_id}"] == 1 + len(v.drafts)
        assert "a forward of its own" in shown.batch.layout.title.text
        assert sum(widths.values()) == view.batch.num_tokens
        assert f"{view.batch.num_tokens} of " in shown.summary


def test_a_verify_step_is_drawn_as_one(models):
    """A chain verify: the committed token first, each draft's fate, the strategy's commit in words."""
    run = lab.run_lab(models["trained_k3"], PROMPTS[:1], lab.sampling_params(8), speculative="mtp",
                      num_speculative_tokens=K, spec_state="slots")
    tv = step_views.TraceViews(run.header, run.trace)
    i = next(j for j, v in enumerate(tv.views) if v.verifies)
    v = tv.views[i].verifies[0]
    shown = in_language("en", tv.at, i)
    cells = shown.verify.data[0]
    fates = [line.split("<br>")[1] for line in cells.text[0] if line]
    assert fates[0] == "committed" and len(fates) >= 1 + len(v.drafts)
    assert fates[1:1 + v.num_accepted] == ["accepted"] * min(v.num_accepted, v.kept)
    assert fates[1 + v.num_accepted:1 + len(v.drafts)] == ["rejected"] * (len(v.drafts) - v.num_accepted)
    row = shown.verify_rows[0]
    assert row["the KDA state's rollback"].startswith(f"made slot {v.kept - 1} of its 1 + {K}")
    assert f"1 + {K} tokens, {v.kept - 1} kept" in shown.summary
    assert "Prefill chunks: —" in shown.summary  # a verify is not a prefill chunk
    zh = in_language("zh", tv.at, i)
    assert "验证" in zh.summary and "verify r" not in zh.summary


def _combos():
    spec = st.tuples(st.sampled_from(["ngram", "draft", "mtp"]), st.sampled_from(SPEC_STATES))
    return st.tuples(st.sampled_from(["trained", "trained_k3"]), spec, st.sampled_from(prefix_cache_modes()),
                     st.booleans(), st.booleans(), st.booleans(), st.sampled_from(["batch", "conversation"]))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(combo=_combos())
def test_property_every_lab_configuration_is_drawn(models, combo):
    model, (drafter, spec_state), cache, static, tight, tree, mode = combo
    if drafter == "mtp":
        model = "trained_k3"  # the MTP layer is K3's
    tree = tree and drafter == "ngram" and STRATEGIES[spec_state].supports_trees and not static
    kw = engine_args(models, model, drafter, spec_state, cache, static, tight and mode == "batch", tree)
    run = lab.run_lab(models[model], PROMPTS, lab.sampling_params(MAX_TOKENS), mode=mode, **kw)
    check_every_step(run)
