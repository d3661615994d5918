"""The Live page against a running server (AppTest): connect, read the steps as requests run, follow the
newest step, pause and step back, the cache snapshots drawn with the Lab's views, the downloads; a bad
URL, an unreachable server and a wrong API key are messages; English and Chinese."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

pytest.importorskip("uvicorn")

from apptest_util import chart_specs, open_page  # noqa: E402
from kda_ref import LLM, ModelConfig, SamplingParams  # noqa: E402
from kda_ref.model import HybridModel  # noqa: E402
from kda_ref.server.live import LiveTrace  # noqa: E402
from kda_ref.server.loop import Stream  # noqa: E402
from kda_ref.server.serve import ServerThread, make_server  # noqa: E402
from model_viz.i18n import t  # noqa: E402
from model_viz.scenarios import live  # noqa: E402

PAGE = "app_pages/live.py"
PARAMS = SamplingParams(max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def served():
    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    ring = LiveTrace(64)
    srv = make_server(LLM(model, tracer=ring, prefix_cache="radix"), ring, model_name="micro", api_key="k")
    with ServerThread(srv) as url:
        yield srv, url


def run_requests(srv, prompts, watched: bool = True) -> None:
    """Requests straight through the server's loop (the HTTP path is tests/test_server.py's); ``watched``:
    a reader is attached first (the live trace takes cache snapshots only while one is)."""
    if watched and srv.live is not None:
        srv.live.since(1 << 60)
    streams: list[Stream] = [srv.loop.submit(p, PARAMS) for p in prompts]
    for s in streams:
        assert [k for k, _ in s][-1] == "done"


def connect(lang: str, url: str, key: str = "k"):
    at = open_page(PAGE, lang)
    at.text_input(key="live_url").set_value(url)
    at.text_input(key="live_key").set_value(key).run()
    at.button(key="live_connect").click().run(timeout=60)
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_connect_follow_pause_step_back_and_download(served, lang):
    srv, url = served
    run_requests(srv, ["shared system prompt, then a", "shared system prompt, then b"])
    at = connect(lang, url)
    window = at.session_state["live_reader"].window
    assert window.records and not at.error
    last = at.session_state["live_step"]
    assert last > 0 and len(chart_specs(at)) >= 5  # batch, timeline, pool area and strip, tree, queues
    run_requests(srv, ["shared system prompt, then c"])
    at.button(key="live_refresh").click().run(timeout=60)
    assert at.session_state["live_step"] > last  # live: follows the newest step
    at.toggle(key="live_pause").set_value(True).run()
    slider = at.select_slider(key="live_step")  # the engine's step numbers
    first = int(slider.options[0])
    assert int(slider.options[-1]) == at.session_state["live_step"]
    slider.set_value(first).run()
    assert at.session_state["live_step"] == first and not at.exception  # paused: steps back through the window
    assert f"Step {first}**" in " ".join(m.value for m in at.markdown) or f"第 {first} 步" in " ".join(
        m.value for m in at.markdown)  # the text names the step the slider shows
    rows = at.dataframe[0].value
    assert t("live.col.ttft", lang) in rows.columns
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == [t("lab.download_jsonl", lang), t("lab.download_chrome", lang)]


def test_window_trace_feeds_the_lab_views(served):
    srv, url = served
    run_requests(srv, ["a tree of prefixes", "a tree of suffixes"])
    w = live.LiveWindow()
    w.add(live.fetch(url, -1, "k"))
    header, events = w.trace()
    assert header["tree_steps"] and header["mla_layers"] and events
    assert json.loads(w.jsonl().splitlines()[0])["scenario"] == "live"
    assert w.add(live.fetch(url, w.last_step, "k")) == 0  # nothing new: nothing added
    small = live.LiveWindow(max_steps=3)
    small.add(live.fetch(url, -1, "k"))
    assert len(small.records) == 3 and small.records[-1]["step"] == w.last_step


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_bad_url_unreachable_server_and_wrong_key_are_messages(served, lang):
    _, url = served
    at = connect(lang, "ftp://nowhere")
    assert [e.value for e in at.error] == [t("live.err.url", lang, url="ftp://nowhere")]
    at = connect(lang, "http://127.0.0.1:9")  # the discard port: nothing listens
    assert at.error and at.error[0].value.startswith(t("live.err.unreachable", lang, url="http://127.0.0.1:9",
                                                       msg="")[:10])
    at = connect(lang, url, key="wrong")
    assert at.error and "401" in at.error[0].value


def test_a_block_cache_server_sends_block_snapshots():
    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    ring = LiveTrace(16)
    llm = LLM(model, tracer=ring, prefix_cache="block", block_size=16, hash_unit=16, mamba_cache_mode="all")
    srv = make_server(llm, ring, model_name="micro")
    with ServerThread(srv) as url:
        run_requests(srv, ["x" * 40, "x" * 40 + " more"])
        w = live.LiveWindow()
        w.add(live.fetch(url, -1))
    header, _ = w.trace()
    blocks = header["block_steps"]
    assert "tree_steps" not in header and blocks and blocks[-1]["block_size"] == 16
    assert any(u["kv"] for u in blocks[-1]["units"]) and any(u["state"] is not None for u in blocks[-1]["units"])
    assert len(w.records) <= 16  # the ring's bound


def _doc(steps, first):
    return {"header": {"kda_layers": [0], "mla_layers": [1]}, "first_step": first, "last_step": steps[-1],
            "records": [{"step": s, "events": [], "state": {"running": [s], "waiting": [], "inbox": 1,
                                                             "requests": {str(s): {"ttft_s": 0.01 * s}}}}
                        for s in steps]}


def test_the_window_counts_the_steps_it_missed_and_stays_bounded():
    w = live.LiveWindow(max_steps=4)
    assert w.add(_doc([1, 2, 3], 1)) == 3 and w.missed == 0
    assert w.add(_doc([2, 3, 4], 2)) == 1  # overlapping answers add only the new steps
    assert w.add(_doc([9, 10], 9)) == 2 and w.missed == 4  # steps 5-8 left the ring before they were read
    assert [r["step"] for r in w.records] == [3, 4, 9, 10]
    assert w.state_at(5)["running"] == [4] and w.state_at(9)["requests"] == {"9": {"ttft_s": 0.09}}
    assert w.state_at(0) == w.records[0]["state"]  # before the first record kept: the first


def test_bad_addresses_are_refused_before_any_request():
    for bad in ("", "localhost:8000", "ftp://x", "http://"):
        with pytest.raises(live.LiveError):
            live.check_url(bad)
    assert live.check_url(" http://127.0.0.1:8000/ ") == "http://127.0.0.1:8000"


def test_a_restarted_server_starts_the_window_again():
    w = live.LiveWindow()
    w.add(_doc([5, 6, 7], 5))
    assert w.add({"header": {}, "first_step": 1, "last_step": 2, "records": []}) == 0  # asked since=7: nothing
    assert w.restarts == 1 and w.records == [] and w.last_step == -1  # the next poll asks since=-1
    assert w.add(_doc([1, 2], 1)) == 2 and [r["step"] for r in w.records] == [1, 2]


def test_a_speculative_k3_server_is_followed_and_every_step_drawn():
    """The command docs/serving.md shows (the K3 demo, a radix cache, MTP drafts): the page connects, follows
    the newest step, then steps through every step of its window with the verify steps drawn as verifies."""
    from model_viz.scenarios import common as cs

    ring = LiveTrace(64)
    llm = LLM(cs.trained_model(kind="k3"), tracer=ring, prefix_cache="radix", checkpoint_policy="sglang",
              speculative="mtp")
    srv = make_server(llm, ring, model_name="trained-k3")
    with ServerThread(srv) as url:
        run_requests(srv, ["The cat sat on the mat and", "The cat sat on the mat, then"])
        at = connect("en", url, key="")
        slider = at.select_slider(key="live_step")
        steps = [int(s) for s in slider.options]
        assert at.session_state["live_step"] == steps[-1] and len(steps) > 3
        at.toggle(key="live_pause").set_value(True).run()
        verified = 0
        for step in steps:
            at.select_slider(key="live_step").set_value(step).run()
            assert not at.exception, (step, at.exception)
            text = " ".join(m.value for m in at.markdown)
            assert f"**Step {step}**" in text
            verified += "verify r" in text
        assert verified > 0  # MTP drafts were verified, and drawn as verifies


def test_the_trace_is_paged_and_the_page_reads_up_to_the_newest_step():
    """``/kda/trace`` answers at most ``limit`` records (64 by default); the Live page's poll reads page after
    page until it reaches the server's newest step."""
    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    ring = LiveTrace(128)
    srv = make_server(LLM(model, tracer=ring), ring, model_name="micro")
    with ServerThread(srv) as url:
        for b in range(14):
            run_requests(srv, [f"request {b}"])
        with urllib.request.urlopen(f"{url}/kda/trace?since=-1&limit=3", timeout=30) as r:
            assert len(json.loads(r.read())["records"]) == 3
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{url}/kda/trace?limit=0", timeout=30)
        assert e.value.code == 400
        one = live.fetch(url, -1)
        doc = live.fetch_pages(url, -1)
    assert len(one["records"]) == 64 < one["last_step"]
    assert doc["records"][-1]["step"] == doc["last_step"] and len(doc["records"]) > 64 and "pool_base" in doc
