"""Measure each page's first visit in a real browser: a fresh ``streamlit run app.py``, headless Chromium.

    python -m model_viz.ui.browser_times [--one-server] [--out docs/bench/browser_times.json] [--pages ...]

A measurement, not a test. ``serve``, ``chromium`` and ``wait_idle`` also drive ``tests/test_browser.py``;
they need Debian's ``chromium`` (``/usr/bin/chromium``) and the ``playwright`` package.

Design notes: ``docs/visualizer.md#timing-first-visits-in-a-browser``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request

from .page_index import PAGES

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
APP_IDLE = "[data-testid='stApp'][data-test-script-state='notRunning']"
CONNECTED = "[data-testid='stApp'][data-test-connection-state='CONNECTED']"
CHARTS_DRAWN = ("Array.from(document.querySelectorAll('.js-plotly-plot'))"
                ".every(p => p.querySelector('.main-svg'))")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, log: pathlib.Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"streamlit did not become healthy in {timeout:.0f} s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def serve(log: pathlib.Path, timeout: float = 60.0):
    """A fresh ``streamlit run app.py`` on a free local port; yields its URL, stops it on exit."""
    port = free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
           "--server.port", str(port), "--server.address", "127.0.0.1", "--server.fileWatcherType", "none",
           "--browser.gatherUsageStats", "false", "--global.developmentMode", "false"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log, timeout)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextlib.contextmanager
def chromium(viewport: tuple[int, int] = (1400, 1000)):
    """A headless Chromium page and the list collecting its JavaScript errors."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            yield page, errors
        finally:
            browser.close()


def wait_idle(page, min_charts: int = 0, timeout_ms: int = 45_000) -> None:
    """Wait until the script run has ended and (with ``min_charts``) that many charts are drawn."""
    page.wait_for_selector(CONNECTED, timeout=timeout_ms)
    page.wait_for_selector(APP_IDLE, timeout=timeout_ms)
    page.wait_for_selector("[data-testid='stStatusWidget']", state="hidden", timeout=timeout_ms)
    if min_charts:
        page.wait_for_function(
            f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {min_charts}", timeout=timeout_ms)
    page.wait_for_function(CHARTS_DRAWN, timeout=timeout_ms)


SETTLED = ("(() => { const app = document.querySelector(\"[data-testid='stApp']\");"
           " const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));"
           " return [app && app.dataset.testScriptState === 'notRunning' && app.dataset.testConnectionState === 'CONNECTED'"
           " && !document.querySelector(\"[data-testid='stStatusWidget']\") && !!document.querySelector('h1')"
           " && plots.every(p => p.querySelector('.main-svg')), plots.length]; })()")


def wait_settled(page, quiet_s: float = 1.5, timeout_s: float = 120.0) -> float:
    """Poll until the run has ended, every chart is drawn and nothing changed for ``quiet_s`` (a page can
    rerun once, and charts appear after the run's status): returns the time.perf_counter() at which
    that final state began."""
    deadline, since, last = time.monotonic() + timeout_s, None, None
    while time.monotonic() < deadline:
        done, charts = page.evaluate(SETTLED)
        now = time.perf_counter()
        if done and since is not None and charts == last:
            if now - since >= quiet_s:
                return since
        else:
            since = now if done else None
        last = charts
        page.wait_for_timeout(100)
    raise TimeoutError(f"the page did not settle in {timeout_s:.0f} s")


def first_visit(page, url: str, slug: str) -> dict:
    """Open ``url/<slug>`` (the home page for ``home``) and time it until its final state is drawn."""
    path = "" if slug == "home" else "/" + slug.replace("_", "-")
    t0 = time.perf_counter()
    page.goto(url + path, wait_until="domcontentloaded")
    seconds = wait_settled(page) - t0
    return {"page": slug, "first_visit_s": round(seconds, 2),
            "charts": page.locator(".js-plotly-plot").count(),
            "exceptions": page.locator("[data-testid='stException']").count(),
            "page_not_found": page.get_by_text("Page not found").count()}


def measure(slugs: list[str], log_dir: pathlib.Path, fresh_server: bool = True) -> list[dict]:
    """The rows of the table. ``fresh_server``: one new server per page, the page the first thing it
    runs (the strictest first visit: the process imports torch and loads the model for it); otherwise
    one server for all pages, visited in order, each page's first visit in a new browser session."""
    log_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    with contextlib.ExitStack() as shared:
        url = None if fresh_server else shared.enter_context(serve(log_dir / "server.log"))
        for slug in slugs:
            with contextlib.ExitStack() as each:
                here = url or each.enter_context(serve(log_dir / f"{slug}.log"))
                page, errors = each.enter_context(chromium())
                row = first_visit(page, here, slug)
            row["js_errors"] = len(errors)
            rows.append(row)
            print(f"| {slug} | {row['first_visit_s']:.1f} | {row['charts']} |", flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    slugs = [p.slug for p in PAGES]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pages", nargs="+", choices=slugs, default=slugs, help="the pages to visit (default: all)")
    p.add_argument("--out", help="write the rows as JSON")
    p.add_argument("--logs", default="artifacts/browser_times", help="folder for each server's log")
    p.add_argument("--one-server", action="store_true",
                   help="one server for all pages, visited in order (default: a fresh server per page)")
    a = p.parse_args(argv)
    print("| page | first visit (s) | charts |\n|---|---|---|")
    rows = measure(a.pages, ROOT / a.logs, fresh_server=not a.one_server)
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
