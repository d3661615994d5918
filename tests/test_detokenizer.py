"""``IncrementalDetokenizer`` (a request's one detokenizer, the engine's): the text it shows only grows and
ends as the final text, unfinished UTF-8 characters and possible stop-string starts are held back, the
text is cut at the earliest stop string as the tokens arrive, a speculative step's question
(:meth:`tokens_until_stop`) changes nothing, and ``SamplingParams.stop`` ends offline requests -- plain,
speculative and batched -- at the same token, with the text the server sends."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.engine import RequestError
from kda_ref.engine.stopping import IncrementalDetokenizer
from kda_ref.tokenizer import ByteTokenizer

TOK = ByteTokenizer()


def run(ids: list[int], stop=(), step: int = 1) -> tuple[str, IncrementalDetokenizer, list[str]]:
    """Feed ``ids`` ``step`` at a time; the texts shown after each feed, and the final text."""
    d = IncrementalDetokenizer(TOK, tuple(stop))
    shown = []
    for i in range(0, len(ids), step):
        d.add(ids[i:i + step])
        shown.append(d.text)
    return d.finish(), d, shown


def test_multibyte_characters_are_never_split():
    text, _, shown = run(list("中文 ok".encode()))
    assert text == "中文 ok" and not any("\ufffd" in s for s in shown)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="abc中 ", max_size=30), st.lists(st.text(alphabet="abc", min_size=1, max_size=4), max_size=3),
       st.integers(1, 4), st.lists(st.tuples(st.integers(0, 40), st.sampled_from([0xFF, 0xE4, 0xB8, 258])),
                                   max_size=3))
def test_the_text_grows_to_the_final_text_cut_at_the_first_stop(text, stops, step, junk):
    ids = list(text.encode())
    for at, bad in junk:  # broken UTF-8 and a special token, as a model's sampled bytes can be
        ids.insert(min(at, len(ids)), bad)
    text = TOK.decode(ids)
    got, d, shown = run(ids, stops, step)
    assert all(a == b[:len(a)] for a, b in zip(shown, shown[1:] + [got]))  # only grows, ends as the final text
    # the oracle: the first token (fed one by one inside each step) after which the text holds a stop string
    for n in range(1, len(ids) + 1):
        seen = TOK.decode(ids[:n])
        hits = [(seen.find(s), s) for s in stops if s in seen]
        if hits:
            cut, first = min(hits)
            assert got == seen[:cut] and d.stopped and len(d.ids) == n
            kept = TOK.decode(ids[:d.stopped_at])  # the fewest tokens that reach through the stop string
            assert kept.startswith(seen[:cut] + first) and not TOK.decode(ids[:d.stopped_at - 1]).startswith(
                seen[:cut] + first)
            return
    assert got == text and not d.stopped


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="ab中", max_size=20), st.text(alphabet="ab中", max_size=8),
       st.lists(st.text(alphabet="ab", min_size=1, max_size=3), max_size=2))
def test_asking_how_many_tokens_a_stop_keeps_changes_nothing(before, after, stops):
    d = IncrementalDetokenizer(TOK, tuple(stops))
    d.add(list(before.encode()))
    state = (d.mark(), list(d.ids), d.settled, d.text)
    asked = d.tokens_until_stop(list(after.encode()))
    assert (d.mark(), list(d.ids), d.settled, d.text) == state
    real = IncrementalDetokenizer(TOK, tuple(stops))
    real.add(list(before.encode()))
    n = None
    if not real.stopped:
        for m, t in enumerate(after.encode(), start=1):
            if real.add([t]):
                n = m
                break
    assert asked == (0 if d.stopped else n)


@pytest.fixture(scope="module")
def micro():
    from kda_ref.model import HybridModel

    return HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()


def test_offline_stop_strings_end_the_request_at_the_same_token_plain_or_speculative(micro):
    prompt, params = "ab" * 20, dict(max_tokens=24, temperature=0, ignore_eos=True)
    full = LLM(micro).generate([prompt], SamplingParams(**params))[0]
    stop = next(full.text[i:i + 2] for i in range(3, len(full.text) - 2) if "\ufffd" not in full.text[i:i + 2])
    outs = [LLM(micro, **kw).generate([prompt, "zz" + prompt], SamplingParams(**params, stop=[stop]))[0]
            for kw in ({}, {"speculative": "ngram", "num_speculative_tokens": 4})]
    for o in outs:
        assert o.finish_reason == "stop" and o.text == full.text[:full.text.index(stop)]
        assert TOK.decode(o.token_ids).startswith(o.text + stop) and o.token_ids == full.token_ids[:len(o.token_ids)]
    assert outs[0].token_ids == outs[1].token_ids


def test_a_stop_string_needs_a_tokenizer_and_a_sane_list(micro):
    with pytest.raises(RequestError, match=r"^prompts\[0\]: stop: stop strings are found in the output.s text"):
        LLM(micro, tokenizer=None).generate([[1, 2, 3]], SamplingParams(stop=["x"]))
    for bad in ([""], ["x"] * 17, [3], "x" * 300):
        with pytest.raises(RequestError, match="^stop: "):
            SamplingParams(stop=bad)
    assert SamplingParams(stop="ab").stop == ("ab",)
