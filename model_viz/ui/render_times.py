"""Measure each app page's first render, headless (``streamlit.testing.v1.AppTest``).

    python -m model_viz.ui.render_times [--out docs/bench/render_times.json] [--repeats 3]

For every page in ``app_pages/``: a first session renders it once (its scenario computations fill
``st.cache_data``: the "cold" time), then fresh sessions render it again ("cached": what a visitor
sees once the scenario traces are cached; the median of ``--repeats``). Times are server-side script
runs (the browser's drawing of the plotly charts comes on top). A measurement, not a test: nothing is
asserted about the numbers.
"""

from __future__ import annotations
import argparse
import json
import pathlib
import statistics
import time


ROOT = pathlib.Path(__file__).resolve().parents[2]


def _render(page: str) -> float:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    t0 = time.perf_counter()
    at.switch_page(page).run()
    dt = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(f"{page}: {at.exception[0].message}")
    return dt


def measure(repeats: int = 3, pages: list[str] | None = None) -> list[dict]:
    pages = pages or sorted(f"app_pages/{p.name}" for p in (ROOT / "app_pages").glob("*.py"))
    rows = []
    for page in pages:
        cold = _render(page)
        cached = [_render(page) for _ in range(repeats)]
        rows.append({"page": page, "cold_s": cold, "cached_s": statistics.median(cached), "cached_max_s": max(cached)})
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="fresh sessions per page after the first")
    p.add_argument("--out", help="write the rows as JSON")
    a = p.parse_args(argv)
    rows = measure(a.repeats)
    print("| page | first render, cold (s) | first render, cached (median s) |\n|---|---|---|")
    for r in rows:
        print(f"| `{r['page']}` | {r['cold_s']:.2f} | {r['cached_s']:.2f} |")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
