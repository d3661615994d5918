"""The sampler's features, each against a plain torch computation: penalties (vLLM's ``apply_penalties``),
top_p / min_p (a sorted cumulative sum), seeded sampling, each token's logprob and its top N (the model's
own fp32 log-softmax), prompt logprobs (one whole forward), and the combinations the engine refuses."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.engine.request import RequestError
from kda_ref.engine.sampling import apply_penalties, filter_probs
from kda_ref.model import HybridModel

PROMPT = [5, 6, 7, 5, 6, 9, 9, 9, 12, 40, 41, 5]


@pytest.fixture(scope="module")
def model():
    return HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()


@settings(max_examples=60, deadline=None)
@given(rep=st.floats(0.5, 2.0), freq=st.floats(-2, 2), pres=st.floats(-2, 2), seed=st.integers(0, 1000))
def test_penalties_are_vllms_formula(rep, freq, pres, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(40, generator=g) * 3
    prompt, output = [1, 2, 3, 3], [3, 7, 7, 7, 9]
    p = SamplingParams(repetition_penalty=rep, frequency_penalty=freq, presence_penalty=pres)
    want = logits.clone()
    for t in set(prompt) | set(output):
        want[t] = want[t] / rep if want[t] > 0 else want[t] * rep
    for t in set(output):
        want[t] -= freq * output.count(t) + pres
    torch.testing.assert_close(apply_penalties(logits, p, prompt, output), want)


@settings(max_examples=60, deadline=None)
@given(top_p=st.floats(0.05, 1.0), min_p=st.floats(0.0, 0.5), top_k=st.integers(0, 12), seed=st.integers(0, 1000))
def test_filters_keep_what_their_definitions_keep(top_p, min_p, top_k, seed):
    probs = torch.softmax(torch.randn(30, generator=torch.Generator().manual_seed(seed)) * 2, -1)
    keep = probs >= min_p * probs.max()
    if top_k:
        keep &= probs >= torch.sort(probs, descending=True).values[min(top_k, 30) - 1]
    left = torch.where(keep, probs, torch.zeros_like(probs))
    order = torch.argsort(left, descending=True)
    mass, nucleus = 0.0, set()
    for i in order.tolist():  # the most likely first, until their mass reaches top_p (the crossing one kept)
        if left[i] == 0 or mass >= top_p * float(left.sum()):
            break
        nucleus.add(i)
        mass += float(left[i])
    out = filter_probs(probs, top_k, top_p, min_p)
    assert set(torch.nonzero(out).flatten().tolist()) == nucleus and abs(float(out.sum()) - 1) < 1e-5


def test_greedy_with_a_penalty_is_the_argmax_of_the_penalised_logits():
    from kda_ref.train import load_trained

    trained = load_trained()  # it repeats what it read: a penalty has something to change
    text = "a b a b a b a b a b a b"
    p = SamplingParams(max_tokens=8, repetition_penalty=1.8, frequency_penalty=0.5, ignore_eos=True, return_logits=True)
    out = LLM(trained).generate([text], p)[0]
    for m, tok in enumerate(out.token_ids):
        want = apply_penalties(out.logits[m], p, out.prompt_token_ids, out.token_ids[:m])
        assert tok == int(torch.argmax(want))
    plain = LLM(trained).generate([text], SamplingParams(max_tokens=8, ignore_eos=True))[0]
    assert plain.token_ids != out.token_ids  # the penalty changed the answer


def test_seeded_filtered_sampling_is_reproducible_and_stays_in_the_nucleus(model):
    p = SamplingParams(max_tokens=10, temperature=1.3, top_p=0.3, min_p=0.05, seed=7, ignore_eos=True,
                       return_logits=True)
    a, b = (LLM(model).generate([PROMPT], p)[0] for _ in range(2))
    assert a.token_ids == b.token_ids
    for m, tok in enumerate(a.token_ids):
        probs = torch.softmax(a.logits[m] / 1.3, -1)
        assert filter_probs(probs, 0, 0.3, 0.05)[tok] > 0


def test_logprobs_are_the_models_own_log_softmax(model):
    p = SamplingParams(max_tokens=6, logprobs=3, prompt_logprobs=2, ignore_eos=True, return_logits=True)
    llm = LLM(model, prefix_cache="radix", max_num_batched_tokens=5)  # prompt chunks of 5: rows across steps
    llm.generate([PROMPT], SamplingParams(max_tokens=2))  # the cache holds the prompt: the next must not use it
    out = llm.generate([PROMPT], p)[0]
    for m, e in enumerate(out.logprobs):
        lp = torch.log_softmax(out.logits[m].float(), -1)
        assert e["token"] == out.token_ids[m] and e["logprob"] == pytest.approx(float(lp[e["token"]]), abs=1e-5)
        assert [i for i, _ in e["top"]] == torch.topk(lp, 3).indices.tolist() and e["rank"] >= 1
    with torch.no_grad():
        whole = torch.log_softmax(model(torch.tensor(PROMPT), None, None, logits="all").float(), -1)
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(PROMPT)
    for pos in range(1, len(PROMPT)):
        assert out.prompt_logprobs[pos]["logprob"] == pytest.approx(float(whole[pos - 1, PROMPT[pos]]), abs=1e-4)


def test_a_logprobs_rank_is_one_plus_the_tokens_strictly_more_likely(model):
    """``rank`` is 1 + how many vocabulary entries have a strictly larger logprob (the argmax: 1), checked
    against the full fp32 log-softmax where it is not 1: tokens sampled at temperature 1.5 (seeded) and the
    prompt's own tokens under a random model."""
    p = SamplingParams(max_tokens=8, temperature=1.5, seed=3, logprobs=1, prompt_logprobs=1, ignore_eos=True,
                       return_logits=True)
    out = LLM(model).generate([PROMPT], p)[0]
    with torch.no_grad():
        whole = torch.log_softmax(model(torch.tensor(PROMPT), None, None, logits="all").float(), -1)
    rows = [(torch.log_softmax(out.logits[m].float(), -1), e) for m, e in enumerate(out.logprobs)]
    rows += [(whole[pos - 1], out.prompt_logprobs[pos]) for pos in range(1, len(PROMPT))]
    ranks = []
    for lp, e in rows:
        assert e["rank"] == 1 + int((lp > lp[e["token"]]).sum()), e
        ranks.append(e["rank"])
    assert max(ranks) > 1  # tokens that are not the argmax were checked


def test_what_the_engine_cannot_honour_is_refused_by_name(model):
    spec = LLM(model, speculative="ngram")
    for kw in (dict(top_p=0.5), dict(repetition_penalty=1.2), dict(min_p=0.1)):
        with pytest.raises(RequestError, match="speculative decoding"):
            spec.generate([PROMPT], SamplingParams(max_tokens=2, **kw))
    for kw, name in ((dict(top_p=0.0), "top_p"), (dict(logprobs=21), "logprobs"), (dict(presence_penalty=3), "presence_penalty"),
                     (dict(repetition_penalty=0), "repetition_penalty")):
        with pytest.raises(RequestError, match=name):
            SamplingParams(**kw)
