"""The Live page on a server that keeps no ``/kda/trace`` (as vLLM and SGLang do not): it follows the
server's KV events and ``/metrics`` instead -- the prefix forest with its state blocks apart from its KV
blocks, block text from ``/detokenize``, KV usage and hit rate over time, queues, and what such servers do
not publish, in English and Chinese; the watcher's forest is the cache's own index."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("zmq")

from apptest_util import APP, chart_specs, new_app, open_page  # noqa: E402
from kda_ref import LLM, ModelConfig  # noqa: E402
from kda_ref.kv_events.config import parse_kv_events_config  # noqa: E402
from kda_ref.model import HybridModel  # noqa: E402
from kda_ref.server.serve import ServerThread, make_server  # noqa: E402
from model_viz.figures import watch as watch_fig  # noqa: E402
from model_viz.i18n import t  # noqa: E402
from model_viz.scenarios import watch  # noqa: E402
from model_viz.i18n import in_language

PAGE = "app_pages/live.py"
KV = {"enable_kv_cache_events": True, "endpoint": "tcp://*:0", "replay_endpoint": "tcp://*:0"}


@pytest.fixture(scope="module")
def served():
    """A radix server with KV events and no live trace (``--trace-steps 0``), and the requests it ran."""
    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    llm = LLM(model, prefix_cache="radix")
    srv = make_server(llm, None, model_name="micro", kv_events=parse_kv_events_config(KV))
    with ServerThread(srv) as url:
        yield llm, url


def _complete(url: str, prompt) -> None:
    body = json.dumps({"prompt": prompt, "max_tokens": 3, "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=60).read()


def test_the_watcher_holds_the_caches_index_and_lays_it_on_one_axis(served):
    llm, url = served
    kind, w = watch.connect(url)
    try:
        assert kind == "watch" and w.sources
        time.sleep(0.3)
        for tail in ("a cat sat on the mat", "a dog sat down"):
            _complete(url, "The prefix shared by both requests, then " + tail)
        want = {g: {h: (b.parent, b.tokens) for h, b in blocks.items()}
                for g, blocks in llm.prefix_cache.kv_blocks().groups.items()}
        deadline = time.monotonic() + 30
        while {g: v["blocks"] for g, v in w.view()["groups"].items()} != want:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        view = w.view()
        assert {g["kind"] for g in view["groups"].values()} == {"mla_attention", "mamba"}
        pos = view["layout"]
        kv = view["groups"][0]["blocks"]
        for h, (parent, tokens) in kv.items():  # a block starts where its parent ends
            assert pos[h][1] - pos[h][0] == len(tokens)
            assert parent not in kv or pos[h][0] == pos[parent][1]
        assert len(view["rows"]) == 2  # two paths: the branch after the shared prefix
        first = min(kv, key=lambda h: pos[h][0])
        assert w.token_text(kv[first][1]).startswith("<bos>The prefix")  # the server's /detokenize, specials kept
        fig = in_language("en", watch_fig.forest_figure, view, {})
        assert {tr.marker.symbol for tr in fig.data if tr.mode == "markers" and tr.marker.symbol} == {"diamond"}
    finally:
        w.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_live_page_draws_a_server_without_a_trace(served, lang):
    llm, url = served
    _complete(url, "one more request so that the metrics move")
    at = open_page(PAGE, lang)
    at.text_input(key="live_url").set_value(url).run()
    at.button(key="live_connect").click().run(timeout=60)
    assert not at.exception, at.exception
    w = at.session_state["live_watch"]
    try:
        deadline = time.monotonic() + 30
        while not w.view()["layout"] or not w.view()["series"]["t"]:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        at.run(timeout=60)
        assert not at.exception and not at.error
        text = " ".join(m.value for m in at.markdown) + " ".join(i.value for i in at.info)
        assert t("live.watch.title", lang, engine="kda-ref") in " ".join(s.value for s in at.subheader)
        assert t("live.watch.unpublished", lang)[:30] in text
        assert len(chart_specs(at)) >= 2  # the forest and the series
        rows = at.dataframe[0].value
        assert list(rows[t("live.watch.kind", lang)]) == ["mla_attention", "mamba"]
    finally:
        w.close()


def test_the_address_keeps_the_server(served):
    """Connecting writes the server into the address (``?server=``); a page opened with it has it filled in."""
    _, url = served
    at = open_page(PAGE, "en")
    at.text_input(key="live_url").set_value(url).run()
    at.button(key="live_connect").click().run(timeout=60)
    try:
        assert at.query_params["server"] == [url] or at.query_params["server"] == url
    finally:
        at.session_state["live_watch"].close()
    again = new_app(APP, 90)
    again.query_params["server"] = url
    again.run()
    again.switch_page(PAGE).run()
    assert not again.exception and again.text_input(key="live_url").value == url
