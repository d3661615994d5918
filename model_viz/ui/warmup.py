"""Warm the app's process in the background: the imports and models every engine page needs.

The home page calls :func:`start` at the end of each run; the first call in a process starts one daemon
thread that imports torch, the engine and plotly and loads the shared trained model
(:func:`model_viz.scenarios.common.trained_model`, the one most pages run). A visitor who opens the home page
first (what ``streamlit run app.py`` opens) finds them ready when they click through to a page: the
reading time pays for about 2 s of the first page's wait on a 2-core machine. It is not started from
the other pages: a visitor whose first request is a page's own URL needs the CPU for that page, and
Python threads share one interpreter lock, so a warm-up beside it only slowed it down (measured).

The thread imports nothing that plotly looks up in ``sys.modules`` without importing it (pandas,
numpy): a page drawing a figure while the thread was half-way through ``import pandas`` found a
partially initialised module there and failed ("partially initialized module 'pandas' has no attribute
'Series'"). So numpy (which torch imports) is imported by :func:`start` in the caller's thread first,
and pandas is left to the page that needs it (``st.dataframe``'s first use, ~0.9 s with pyarrow here).

The thread draws no random numbers: loading a checkpoint builds the model on the meta device and
fills it from the file, so torch's global generator, which a page's scenario may seed and use at the
same moment, is untouched (``tests/test_app.py`` checks this). The random-weight tiny model is not
built here for that reason (its layers' constructors draw from the global generator).
"""

from __future__ import annotations

import importlib
import threading

_STARTED = threading.Event()
_DONE = threading.Event()
_LOCK = threading.Lock()


def _warm() -> None:
    try:
        import plotly.graph_objects as go

        from ..scenarios import common

        go.Figure(go.Scatter(x=[0], y=[0])).to_json()  # plotly's validators load on a first figure (~0.2 s)

        common.trained_model()
    finally:  # a failure here shows up, with its message, on the page that needs the same thing
        _DONE.set()


def start() -> bool:
    """Start the warm-up thread once per process; True on the call that started it."""
    with _LOCK:
        if _STARTED.is_set():
            return False
        _STARTED.set()
    importlib.import_module("numpy")  # here, not half-imported in the thread when a page's plotly looks it up
    threading.Thread(target=_warm, name="kda-viz-warmup", daemon=True).start()
    return True


def wait(timeout: float | None = None) -> bool:
    """Block until the warm-up has finished (tests and benchmarks); False if ``timeout`` ran out."""
    return _DONE.wait(timeout)
