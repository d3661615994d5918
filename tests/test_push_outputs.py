"""Outputs pushed, not polled: ``LLM.step()`` returns what each step added to every request that asked for
it (``SamplingParams.output_kind``), the deltas add up to the finished output whatever drove the steps,
the server's loop never asks the engine about a request, and the server's process checks a request with
the engine's own checks so that the engine process takes token ids only."""

from __future__ import annotations

import pickle
import threading
import time
from dataclasses import replace

import pytest

from kda_ref import LLM, ModelConfig, OutputKind, SamplingParams
from kda_ref.engine import RequestError
from kda_ref.model import HybridModel

KINDS = [OutputKind.DELTA, OutputKind.TOKENS, OutputKind.FINAL_ONLY]


@pytest.fixture(scope="module")
def micro():
    return HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()


def _params(kind, **kw):
    return SamplingParams(**{"max_tokens": 24, "temperature": 0.8, "seed": 3, "ignore_eos": True, **kw},
                          output_kind=kind)


def _run_steps(llm) -> tuple[dict, dict]:
    """Step ``llm`` to the end: the deltas per request, and each finished output."""
    deltas, done = {}, {}
    while llm.has_unfinished():
        for o in llm.step():
            if o.finished:
                assert o.req_id not in done  # delivered once
                done[o.req_id] = o
            else:
                deltas.setdefault(o.req_id, []).append(o)
    return deltas, done


def _check_adds_up(kind, deltas: list, out) -> None:
    ids = [t for d in deltas for t in d.new_token_ids] + out.new_token_ids
    assert ids == out.token_ids
    if kind is OutputKind.FINAL_ONLY:
        assert deltas == [] and out.new_text == out.text
    elif kind is OutputKind.TOKENS:
        assert all(d.new_text == "" and d.new_token_ids for d in deltas) and out.new_text == out.text
    else:
        assert "".join(d.new_text for d in deltas) + out.new_text == out.text
        assert all(d.new_token_ids or d.new_text for d in deltas)


@pytest.mark.parametrize("spec", [{}, {"speculative": "ngram", "num_speculative_tokens": 3}], ids=["plain", "ngram"])
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
def test_each_steps_deltas_add_up_to_the_output(micro, kind, spec):
    """Text prompts (multi-byte characters held back), one cut by a stop string, sampled; a speculative step
    adds several tokens at once. Every kind gives the same answers as offline ``generate``."""
    prompts = ["ab" * 20, "中文 and more", "the KDA state"]
    full = LLM(micro, **spec).generate(prompts[:1], _params(OutputKind.FINAL_ONLY, temperature=0))[0]
    stop = next(full.text[i:i + 2] for i in range(3, len(full.text) - 2) if "\ufffd" not in full.text[i:i + 2])
    params = [_params(kind, stop=[stop], temperature=0), _params(kind), _params(kind, seed=5)]
    want = LLM(micro, **spec).generate(prompts, [replace(p, output_kind=OutputKind.FINAL_ONLY) for p in params])
    llm = LLM(micro, **spec)
    ids = [llm.add_request(p, sp) for p, sp in zip(prompts, params)]
    deltas, done = _run_steps(llm)
    assert done[ids[0]].finish_reason == "stop"
    for req_id, w in zip(ids, want):
        out = done[req_id]
        assert (out.token_ids, out.text) == (w.token_ids, w.text)
        _check_adds_up(kind, deltas.get(req_id, []), out)


def test_a_verify_step_delivers_its_accepted_drafts_in_one_delta(micro):
    """Drafts that are the true continuation are all accepted: each verify step's delta holds them and the
    bonus token (k + 1 ids), and the deltas still add up to plain decoding's answer."""
    from test_spec_decode import OracleDrafter

    prompt = [7, 8, 9] * 6
    want = LLM(micro).generate([prompt], SamplingParams(max_tokens=17, ignore_eos=True))[0]
    llm = LLM(micro, speculative="ngram", num_speculative_tokens=3)
    llm.scheduler.drafter = OracleDrafter({tuple(prompt): want.token_ids})
    a = llm.add_request(prompt, SamplingParams(max_tokens=17, ignore_eos=True, output_kind=OutputKind.TOKENS))
    deltas, done = _run_steps(llm)
    assert [len(d.new_token_ids) for d in deltas[a]] == [1, 4, 4, 4] and len(done[a].new_token_ids) == 4
    _check_adds_up(OutputKind.TOKENS, deltas[a], done[a])
    assert done[a].token_ids == want.token_ids


def test_tokens_added_while_another_generate_drove_the_steps_come_with_the_next_step(micro):
    """``generate`` steps every request but returns only its own: what another caller's request gained
    meanwhile is not lost, it arrives with that request's next delta (or its output)."""
    llm = LLM(micro)
    a = llm.add_request("some prompt", _params(OutputKind.DELTA, max_tokens=30))
    first = llm.step()  # a's prefill and first token
    llm.generate(["x"], SamplingParams(max_tokens=6, ignore_eos=True))  # a gains tokens here, unseen
    deltas, done = _run_steps(llm)
    assert len(deltas[a][0].new_token_ids) >= 6  # the tokens of generate's steps came in one delta
    _check_adds_up(OutputKind.DELTA, first + deltas[a], done[a])


def test_output_kind_must_be_an_output_kind():
    with pytest.raises(RequestError, match="output_kind: must be an OutputKind"):
        SamplingParams(output_kind="delta")


def test_the_servers_loop_never_asks_the_engine_about_a_request(micro, monkeypatch):
    """Streams, live text and answered-whole alike, get their tokens, text and outputs from what each step
    returns: ``LLM.request`` (a poll) is never called, and the answers are offline ``generate``'s."""
    from kda_ref.server.loop import EngineLoop

    prompts = ["中文 prompt", "hello", [5, 6, 7, 8]]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    want = LLM(micro).generate(prompts, params)
    llm = LLM(micro)

    def polled(req_id):
        raise AssertionError("the loop polled the engine")

    monkeypatch.setattr(llm, "request", polled)
    loop = EngineLoop(llm).start()
    try:
        streams = [loop.submit(p, params, live_text=k != 1) for k, p in enumerate(prompts)]
        events = [list(s) for s in streams]
    finally:
        loop.stop()
    assert loop.error is None and loop.waiting == 0
    for k, (evs, w) in enumerate(zip(events, want)):
        (kind, out), tokens = evs[-1], [v for kind, v in evs[:-1]]
        assert kind == "done" and out.token_ids == w.token_ids == [t for d in tokens for t in d]
        assert "".join(d.text for d in tokens) == (w.text if k != 1 else "")  # answered whole: text at the end
        assert out.text == w.text


def _probe(llm, prompt, params):
    try:
        return llm.check_request(prompt, params)
    except RequestError as e:
        return str(e)


def test_the_server_process_checks_a_request_as_the_engine_does(micro):
    """The checker the HTTP process builds from what the engine process sent (``Front``, pickled as it crosses)
    accepts and refuses exactly as the engine's own: text and ids, an empty prompt, a token outside the
    vocabulary, past ``max_model_len``, past the memory budget, a sampler feature speculation refuses."""
    from kda_ref.server.engine_core import front_of

    cases = [("hello", None), ([1, 2, 3], SamplingParams(max_tokens=4)), ("", None), ([10 ** 6], None),
             ([1] * 500, SamplingParams(max_tokens=60)), ([1] * 10, SamplingParams(max_tokens=40)),
             ([1] * 200, SamplingParams(max_tokens=100)), ([1, 2], SamplingParams(top_p=0.5))]
    seen = []
    for kw in ({"max_model_len": 512, "memory_budget_bytes": 100_000},
               {"speculative": "ngram", "num_speculative_tokens": 2, "prefix_cache": "radix",
               "checkpoint_policy": "sglang"}):
        llm = LLM(micro, **kw)
        served = pickle.loads(pickle.dumps(front_of(llm, 0))).checker()
        got = [_probe(served, p, sp) for p, sp in cases]
        assert got == [_probe(llm, p, sp) for p, sp in cases]
        assert sum(isinstance(g, str) for g in got) >= 3  # refusals, not only acceptances, compared
        seen += [g for g in got if isinstance(g, str)]
    assert any("more than the whole memory budget" in g for g in seen) and any("top_p" in g for g in seen)


def test_the_engine_process_takes_ids_and_does_no_text_work_on_its_pipe_thread(micro):
    """A submission is token ids already checked: the engine process's side (run in this process over a real
    pipe) queues it without checking or encoding anything, and sends the step's events and its admission
    counts in one message per turn."""
    import multiprocessing as mp

    from kda_ref.server.engine_core import CLOSE, NOTE, OUTPUTS, CoreSpec, EngineCore

    ours, theirs = mp.Pipe(duplex=True)
    core = EngineCore(theirs, CoreSpec("random-micro", {"max_num_seqs": 2}, 1, 8, "micro"))

    def no_text_work(*args):
        raise AssertionError("the engine process checked or encoded a request")

    core.loop.llm.check_request = no_text_work
    core.loop.llm.checker.encode = no_text_work
    ours.send((NOTE, "submit", (1, [5, 6, 7], "abc", SamplingParams(max_tokens=3, ignore_eos=True), True)))
    server = threading.Thread(target=core.serve)
    server.start()
    try:
        msgs, deadline = [], time.monotonic() + 60
        while not any(e[1] == "done" for m in msgs for e in m[1]) and time.monotonic() < deadline:
            if ours.poll(0.1):
                msg = ours.recv()
                if msg[0] == OUTPUTS:
                    msgs.append(msg)
        events = [e for m in msgs for e in m[1]]
        tokens = [v for k, kind, v in events if kind == "tokens"]
        out = events[-1][2]
        assert [t for ids, _ in tokens for t in ids] == out.token_ids and len(out.token_ids) == 3
        assert msgs[-1][2] == 1 and msgs[-1][3] == 0  # one submission taken, none waiting
    finally:
        ours.send((CLOSE,))
        server.join(60)
    assert not server.is_alive()


def test_an_event_that_does_not_pickle_fails_its_request_alone():
    """The turn's events travel in one message: one value that cannot be pickled must not take the others (or
    the observer that sends them) down -- its request gets an error event, the rest arrive as they were."""
    import multiprocessing as mp

    from kda_ref.server.engine_core import OUTPUTS, CoreSpec, EngineCore

    ours, theirs = mp.Pipe(duplex=True)
    core = EngineCore(theirs, CoreSpec("random-micro", {"max_num_seqs": 2}, 1, 8, "micro"))
    core.push(1, "tokens", ([5], "a"))
    core.push(2, "done", threading.Lock())  # a lock does not pickle
    core.push(3, "tokens", ([6], "b"))
    core.flush()
    kind, events, taken, waiting = ours.recv()
    assert kind == OUTPUTS and (taken, waiting) == (0, 0)
    assert events[0] == (1, "tokens", ([5], "a")) and events[2] == (3, "tokens", ([6], "b"))
    assert events[1][:2] == (2, "error") and "could not send this request's done event" in events[1][2]
    theirs.close()
