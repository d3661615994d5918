"""``TextStream`` (the server's detokeniser): streamed deltas always add up to the final text, unfinished
UTF-8 characters and possible stop-string starts are held back, and the text is cut at the earliest stop
string with the tokens that produced it kept."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kda_ref.server.text import TextStream
from kda_ref.tokenizer import ByteTokenizer

TOK = ByteTokenizer()


def run(ids: list[int], stop=(), step: int = 1) -> tuple[str, TextStream, list[str]]:
    ts = TextStream(TOK, tuple(stop))
    deltas = [ts.add(ids[i:i + step]) for i in range(0, len(ids), step)]
    deltas.append(ts.finish())
    return "".join(deltas), ts, deltas


def test_multibyte_characters_are_never_split():
    text, _, deltas = run(list("中文 ok".encode()))
    assert text == "中文 ok" and "\ufffd" not in "".join(deltas)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="abc中 ", max_size=30), st.lists(st.text(alphabet="abc", min_size=1, max_size=4), max_size=3),
       st.integers(1, 4), st.lists(st.tuples(st.integers(0, 40), st.sampled_from([0xFF, 0xE4, 0xB8, 258])),
                                   max_size=3))
def test_deltas_add_up_to_the_text_cut_at_the_first_stop(text, stops, step, junk):
    ids = list(text.encode())
    for at, bad in junk:  # broken UTF-8 and a special token, as a model's sampled bytes can be
        ids.insert(min(at, len(ids)), bad)
    text = TOK.decode(ids)
    got, ts, _ = run(ids, stops, step)
    # the oracle: the first prefix (as the tokens arrive, ``step`` at a time) whose text holds a stop string
    for n in range(step, len(ids) + step, step):
        seen = TOK.decode(ids[:n])
        hits = [(seen.find(s), s) for s in stops if s in seen]
        if hits:
            cut, first = min(hits)
            assert got == seen[:cut] and ts.stopped
            kept = TOK.decode(ts.token_ids)  # the fewest tokens that reach through the stop string
            assert kept.startswith(seen[:cut] + first) and not TOK.decode(ts.token_ids[:-1]).startswith(
                seen[:cut] + first)
            return
    assert got == text and not ts.stopped and ts.token_ids == ids
