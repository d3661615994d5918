"""The engine loop a server sits on (``kda_ref.server.EngineLoop``): one thread owns the engine, client
threads submit requests and read their tokens; answers equal offline ``generate``, a cancelled request
returns its memory at once, admission is bounded and nothing accepted is lost, bad input never reaches
the loop."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.engine import RequestError
from kda_ref.model import HybridModel
from kda_ref.server import EngineLoop, LoopStopped, Overloaded
from kda_ref.server.loop import StepObserver
from kda_ref.server.metrics import ServerMetrics

PROMPTS = [[(7 * i + n) % 256 for i in range(n)] for n in (12, 30, 5, 44, 19, 27, 8, 33)]
PARAMS = SamplingParams(max_tokens=12, ignore_eos=True)
TIMEOUT = 60.0


@pytest.fixture(scope="module")
def model():
    return HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()


@contextlib.contextmanager
def running(llm, **kw):
    """A started loop, stopped (what it still runs cancelled) however the test ends: no thread outlives it."""
    loop = EngineLoop(llm, **kw).start()
    try:
        yield loop
    finally:
        if loop.alive:
            loop.stop(drain=False)


def _read(stream) -> tuple[list[int], tuple]:
    """Every token a stream carried, and its last event."""
    tokens = []
    while True:
        kind, value = stream.get(timeout=TIMEOUT)
        if kind != "tokens":
            return tokens, (kind, value)
        tokens += value


def test_concurrent_clients_get_the_offline_answers_streamed(model):
    want = [o.token_ids for o in LLM(model).generate(PROMPTS, PARAMS, use_tqdm=False)]
    got = [None] * len(PROMPTS)
    with running(LLM(model, prefix_cache="radix"), max_waiting=len(PROMPTS)) as loop:
        def client(i):
            got[i] = _read(loop.submit(PROMPTS[i], PARAMS))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(PROMPTS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
        loop.stop()
    for (tokens, (kind, out)), w in zip(got, want):
        assert kind == "done" and tokens == w == out.token_ids  # the streamed pieces add up to the answer
    assert loop.error is None and loop.waiting == 0


def test_a_cancelled_request_returns_its_memory_and_the_others_finish(model):
    llm = LLM(model)
    with running(llm) as loop:
        gone = loop.submit(PROMPTS[3], SamplingParams(max_tokens=200, ignore_eos=True))
        stays = loop.submit(PROMPTS[0], PARAMS)
        assert gone.get(timeout=TIMEOUT)[0] == "tokens"  # it runs
        gone.cancel()
        assert _read(gone)[1] == ("error", "cancelled")
        assert llm.request(gone.req_id) is None  # aborted before the event was sent: its slot and pages are back
        tokens, (kind, _) = _read(stays)
        loop.stop()
    assert kind == "done" and tokens == LLM(model).generate([PROMPTS[0]], PARAMS, use_tqdm=False)[0].token_ids
    assert llm.pool.is_empty()


def test_admission_is_bounded_and_no_accepted_request_is_lost(model):
    want = LLM(model).generate(PROMPTS[4:6], PARAMS, use_tqdm=False)
    with running(LLM(model, max_num_seqs=1), max_waiting=2) as loop:
        first = loop.submit(PROMPTS[1], SamplingParams(max_tokens=60, ignore_eos=True))
        assert first.get(timeout=TIMEOUT)[0] == "tokens"  # running: it no longer waits
        waiting = [loop.submit(p, PARAMS) for p in PROMPTS[4:6]]  # one seat: these two wait
        with pytest.raises(Overloaded, match="max_waiting: 2 requests"):
            loop.submit(PROMPTS[6], PARAMS)
        for stream, w in zip(waiting, want):
            tokens, (kind, _) = _read(stream)
            assert kind == "done" and tokens == w.token_ids
        assert _read(first)[1][0] == "done"
        loop.stop()
        with pytest.raises(LoopStopped):
            loop.submit(PROMPTS[0], PARAMS)


def test_bad_input_is_refused_on_the_clients_thread_and_stop_without_drain_cancels(model):
    llm = LLM(model)
    with pytest.raises(ValueError, match="max_waiting"):
        EngineLoop(llm, max_waiting=0)
    with running(llm) as loop:
        with pytest.raises(RequestError, match="prompt"):
            loop.submit([], PARAMS)
        with pytest.raises(RequestError, match="token"):
            loop.submit([llm.config.vocab_size + 3], PARAMS)
        assert loop.waiting == 0
        long = loop.submit(PROMPTS[2], SamplingParams(max_tokens=500, ignore_eos=True))
        assert long.get(timeout=TIMEOUT)[0] == "tokens"
        loop.stop(drain=False)
        kind, why = _read(long)[1]
        assert (kind, why) == ("error", "cancelled: the server is stopping") and llm.pool.is_empty() and not loop.alive


def test_a_loop_that_dies_answers_every_stream_and_takes_no_more(model):
    """An engine step that raises (here: planted) ends the loop: the running request gets an error event, and
    a later submit is refused instead of waiting forever."""
    llm = LLM(model)

    def broken_step():
        raise RuntimeError("planted")

    llm.step = broken_step  # the loop calls the engine's public step; this engine's raises
    with running(llm) as loop:
        kind, msg = loop.submit(PROMPTS[0], PARAMS).get(timeout=TIMEOUT)
        assert kind == "error" and "planted" in msg
        with pytest.raises(LoopStopped):
            loop.submit(PROMPTS[1], PARAMS)
        loop.stop()  # joins the dead thread at once
        assert isinstance(loop.error, RuntimeError) and not loop.alive


def test_an_observer_that_fails_is_detached_and_serving_goes_on(model):
    from kda_ref.server import StepObserver

    class Broken(StepObserver):
        def after_step(self, loop, ended, stepped):
            raise KeyError("a bug in a metrics exporter")

    want = LLM(model).generate([PROMPTS[0]], PARAMS)[0].token_ids
    # the loop's first look (before any request) already finds it broken
    with pytest.warns(RuntimeWarning, match="Broken failed after a step and was detached"):
        with running(LLM(model), observers=[Broken()]) as loop:
            got, (kind, _) = _read(loop.submit(PROMPTS[0], PARAMS))
            assert kind == "done" and got == want and loop.alive and loop.observers == []


class _HeldTurn(StepObserver):
    """Holds the loop's thread at the top of its turns while ``hold`` is clear (a test's window to submit,
    cancel or stop before the loop takes them); ``turns`` counts the turns that went on, ``ended`` every
    stream the observers were told ended."""

    def __init__(self):
        self.hold, self.turns, self.ended = threading.Event(), threading.Semaphore(0), []

    def between_steps(self, loop) -> None:
        self.hold.wait(TIMEOUT)
        self.turns.release()

    def after_step(self, loop, ended, stepped) -> None:
        self.ended += ended


def test_requests_cancelled_before_they_start_leave_no_count_behind(model):
    """Requests taken from the inbox are counted as waiting until the loop recounts; cancelled before they
    started, they never reach the engine. The recount that follows was unreachable, so an idle loop kept
    counting them: with ``max_waiting`` of them it refused every later request as overloaded, for good.
    They are aborts all the same: the observers (the metrics) are told they ended, as they were not."""
    held, metrics = _HeldTurn(), ServerMetrics("micro")
    with running(LLM(model), max_waiting=2, observers=[held, metrics]) as loop:
        streams = [loop.submit(PROMPTS[i], PARAMS) for i in range(2)]  # the loop is held: both in its inbox
        for s in streams:
            s.cancel()
        held.hold.set()
        for s in streams:
            assert _read(s) == ([], ("error", "cancelled before it started"))
        for _ in range(2):  # two more turns: the one that took them has ended, and the loop is idle
            assert held.turns.acquire(timeout=TIMEOUT)
        assert loop.waiting == 0
        assert all(any(e is s for e in held.ended) for s in streams)
        assert 'kda_request_success_total{finished_reason="abort"} 2.0' in metrics.render().decode()
        want = LLM(model).generate([PROMPTS[2]], PARAMS, use_tqdm=False)[0].token_ids
        assert _read(loop.submit(PROMPTS[2], PARAMS))[0] == want


def test_a_cancelling_stop_is_not_undone_by_a_draining_one_that_lands_later(model):
    """``kda-ref serve`` stops the loop from one thread per signal (the first drains, a later one cancels),
    and the two may reach the loop in either order: a draining stop after a cancelling one turned the
    cancel back into a drain, and the open requests ran on to the end."""
    held = _HeldTurn()
    held.hold.set()
    loop = EngineLoop(LLM(model), observers=[held]).start()
    s = loop.submit(PROMPTS[0], SamplingParams(max_tokens=400, ignore_eos=True))
    assert s.get(timeout=TIMEOUT)[0] == "tokens"  # it runs
    held.hold.clear()
    stops = [threading.Thread(target=loop.stop, kwargs={"drain": d, "timeout": TIMEOUT}) for d in (False, True)]
    for t in stops:  # the loop is held: both stops land before its next turn, the cancelling one first
        t.start()
        time.sleep(0.2)
    held.hold.set()
    for t in stops:
        t.join(TIMEOUT)
    assert not loop.alive and _read(s)[1] == ("error", "cancelled: the server is stopping")


class _RefusingLLM(LLM):
    """An engine whose ``enqueue`` fails for requests of ``max_tokens == 7`` (any failure of the engine's own:
    a torch error, ``MemoryError``)."""

    def enqueue(self, ids, text, params):
        if params.max_tokens == 7:
            raise RuntimeError("enqueue failed")
        return super().enqueue(ids, text, params)


def test_a_loop_that_dies_taking_a_request_answers_that_request_too(model):
    """The loop takes a submission from its inbox before the engine queues it; when queueing it failed, the
    loop died answering the requests it held and those still in the inbox -- not that one, whose client then
    waited for ever. Every stream is answered and records why (``stream.error``)."""
    loop = EngineLoop(_RefusingLLM(model)).start()
    running_one = loop.submit(PROMPTS[0], SamplingParams(max_tokens=400, ignore_eos=True))
    assert running_one.get(timeout=TIMEOUT)[0] == "tokens"
    failing = loop.submit(PROMPTS[1], SamplingParams(max_tokens=7))
    assert loop.wait_stopped(TIMEOUT) and isinstance(loop.error, RuntimeError)
    why = "the engine loop died: RuntimeError: enqueue failed"
    for s in (running_one, failing):
        assert _read(s)[1] == ("error", why) and s.error == why


def test_a_loop_never_started_stops_quietly(model):
    """``kda-ref serve`` stops its loop when a signal comes while it starts, which may be before the loop's
    thread began: joining it raised, a traceback where one log line was promised."""
    loop = EngineLoop(LLM(model))
    loop.stop(drain=False)
    assert not loop.alive and not loop.accepting
