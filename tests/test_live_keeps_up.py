"""The Live page keeps up with a server that steps faster than it draws: it reads from a thread of its own,
every step's compact summary (queues, tokens, the requests that ended) from the server's long summary ring,
so the queue and request tabs have no holes even when the short ring of detailed steps moved on; when it
did, the page says the server stepped faster than it reads -- never that it was not reading -- and the
text, the figures and the slider show the same step."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("uvicorn")

from apptest_util import chart_specs, open_page  # noqa: E402
from kda_ref import LLM, ModelConfig, SamplingParams  # noqa: E402
from kda_ref.model import HybridModel  # noqa: E402
from kda_ref.server.live import LiveTrace  # noqa: E402
from kda_ref.server.serve import ServerThread, make_server  # noqa: E402
from model_viz.i18n import t  # noqa: E402
from model_viz.scenarios import live_reader  # noqa: E402

PARAMS = SamplingParams(max_tokens=6, ignore_eos=True)
N = 30


@pytest.fixture(scope="module")
def served():
    """A server whose ring of detailed steps holds only 8 of them (a busy server's 256 are as short)."""
    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    ring = LiveTrace(8)
    srv = make_server(LLM(model, tracer=ring, prefix_cache="radix", max_num_seqs=2), ring, model_name="micro")
    with ServerThread(srv) as url:
        yield srv, url


def _burst(srv, n: int, tag: str) -> None:
    streams = [srv.loop.submit(f"{tag} request {i}", PARAMS) for i in range(n)]
    for s in streams:
        assert [k for k, _ in s][-1] == "done"


def test_every_step_is_summarised_while_the_details_move_on(served):
    srv, url = served
    reader = live_reader.LiveReader(url, start=False)
    reader.read()  # attached: the server records from now on
    _burst(srv, N, "busy")  # dozens of steps before the next read: far more than the detail ring holds
    reader.read()
    window, summaries = reader.snapshot()
    steps = [s["step"] for s in summaries]
    assert steps == list(range(steps[0], steps[-1] + 1)) and len(steps) > 3 * 8  # every step, no hole
    assert reader.skipped == len(steps) - len(window.records) > 0 and len(window.records) <= 8  # said, not hidden
    series = live_reader.queue_series(summaries)
    assert series["step"] == steps and max(series["running"]) == 2 and max(series["waiting"]) > 0
    table = live_reader.request_table(summaries, window, steps[-1])
    ended = [r for r in table if r.get("done")]
    assert len(ended) == N and all(r["output_tokens"] == 6 and r["ttft_s"] > 0 for r in ended)
    assert srv.metrics.render().decode().count("kda_request_success_total") > 0


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_says_the_truth_and_shows_one_step_everywhere(served, lang):
    srv, url = served
    at = open_page("app_pages/live.py", lang)
    at.text_input(key="live_url").set_value(url).run()
    at.button(key="live_connect").click().run(timeout=60)
    reader = at.session_state["live_reader"]
    try:
        _burst(srv, N, f"page {lang}")
        deadline = time.monotonic() + 30
        while reader.skipped == 0 or not reader.summaries or \
                reader.summaries[-1]["step"] != reader.window.last_step:
            assert time.monotonic() < deadline, (reader.skipped, reader.error)
            time.sleep(0.05)
        at.run(timeout=60)
        assert not at.exception, at.exception
        warning = " ".join(w.value for w in at.warning)
        said = t("live.missed", lang, n=7, lost=0).split("7")[0]  # the sentence up to the count (it moves on)
        assert said in warning and "not reading" not in warning
        step = at.session_state["live_step"]
        assert step == at.session_state["live_drawn"]  # live: the newest step of what this run drew
        text = " ".join(m.value for m in at.markdown)
        assert (f"**Step {step}**" if lang == "en" else f"第 {step} 步") in text
        batch = next(s for s in chart_specs(at) if "cu_seqlens" in str(s["layout"].get("title", "")))
        assert str(step) in batch["layout"]["title"]["text"]  # the figure shows the step the text names
        queues = next(s for s in chart_specs(at) if [tr.get("name") for tr in s["data"]] ==
                      [t("live.queue.running", lang), t("live.queue.waiting", lang)])
        xs = [int(x) for x in queues["data"][0]["x"]]
        assert xs == list(range(xs[0], xs[-1] + 1)) and len(xs) > 8  # the queue chart has every step
    finally:
        reader.close()


def test_a_page_that_looks_again_after_the_idle_time_reads_again(served, monkeypatch):
    """A page paused (or its tab away) past ``IDLE_S`` lets its reader's thread stop; its next look starts
    reading again, so unpausing shows the steps run since instead of the frozen window for good."""
    srv, url = served
    monkeypatch.setattr(live_reader, "IDLE_S", 0.3)
    reader = live_reader.LiveReader(url, interval=0.05)
    try:
        reader.read()
        _until(lambda: not reader.reading)  # nobody looks: the thread stops
        before = reader.window.last_step
        _burst(srv, 2, "after a pause")
        time.sleep(0.2)
        assert reader.window.last_step == before  # not reading while nobody looks
        reader.snapshot()  # the page looks again
        _until(lambda: reader.window.last_step > before)
    finally:
        reader.close()
    assert not reader.reading


def test_a_page_waiting_on_an_idle_server_keeps_its_reader(served, monkeypatch):
    """An unpaused page redraws only when its reader has a new step, so a server idle past ``IDLE_S`` stopped
    the reader and the page never drew again. Each drawing tick touches the reader: it reads on, and the
    steps run after the idle time reach the page."""
    srv, url = served
    monkeypatch.setattr(live_reader, "IDLE_S", 0.3)
    reader = live_reader.LiveReader(url, interval=0.05)
    try:
        reader.read()
        before = reader.window.last_step
        for _ in range(10):  # the page's ticks while the server idles, longer than IDLE_S
            reader.touch()
            time.sleep(0.1)
        assert reader.reading
        _burst(srv, 2, "after an idle time")
        _until(lambda: reader.window.last_step > before)  # drawn at the next tick: no snapshot needed
    finally:
        reader.close()


def _until(done, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_cancelled_request_is_shown_as_aborted(served):
    """The summaries carry each ended request's finish reason, so the Live page's request table tells a
    request its client cancelled from one that ended by its own stop."""
    from model_viz.figures import live as live_fig

    srv, url = served
    reader = live_reader.LiveReader(url, start=False)
    reader.read()
    start = reader.summaries[-1]["step"] if reader.summaries else -1  # the steps of this test only
    gone = srv.loop.submit("a client that leaves", SamplingParams(max_tokens=400, ignore_eos=True))
    while gone.req_id is None:
        time.sleep(0.01)
    gone.cancel()
    _burst(srv, 1, "one that ends")
    deadline = time.monotonic() + 10
    reasons = {}
    while time.monotonic() < deadline and len(reasons) < 2:
        reader.read()
        reasons = {rid: info["finish_reason"] for s in reader.summaries if s["step"] > start
                   for rid, info in s["ended"].items()}
        time.sleep(0.05)
    assert reasons[str(gone.req_id)] == "abort" and sorted(reasons.values()) == ["abort", "length"]
    window, summaries = reader.snapshot()
    rows = live_fig.request_rows(live_reader.request_table(summaries, window, summaries[-1]["step"]))
    states = {r[t("live.col.request")]: r[t("live.col.state")] for r in rows}
    assert states[gone.req_id] == t("live.state.aborted") and t("live.state.done") in states.values()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_time_not_known_yet_reads_as_a_dash(lang):
    """The request table: a TPOT before a request's second token (and a TTFT before its first) is a dash, not
    ``None``; known times keep one decimal; an empty window still has every column."""
    from model_viz.figures import live as live_fig
    from model_viz.i18n import language

    with language(lang):
        frame = live_fig.request_frame([
            {"req_id": 7, "prompt_tokens": 5, "output_tokens": 1, "ttft_s": 0.01234, "tpot_s": None, "done": False},
            {"req_id": 8, "prompt_tokens": 5, "output_tokens": 0, "ttft_s": None, "tpot_s": None, "done": False},
        ]).to_string(delimiter="|").splitlines()
        assert frame[1].split("|")[4:6] == ["12.3", "\u2013"]
        assert frame[2].split("|")[4:6] == ["\u2013", "\u2013"]
        assert "None" not in "".join(frame) and "nan" not in "".join(frame)
        empty = live_fig.request_frame([]).to_string(delimiter="|").splitlines()[0].split("|")[1:]
        assert empty == [t(k) for k in live_fig.COLUMNS]
