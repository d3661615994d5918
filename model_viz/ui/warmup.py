"""Warm the app's process in the background: the imports and models every engine page needs.

The home page calls :func:`start` at the end of each run; the first call in a process starts one daemon
thread that imports torch, the engine and plotly and loads the shared trained model
(:func:`model_viz.scenarios.common.trained_model`). The thread imports neither pandas nor (first) numpy
and draws no random numbers (``tests/test_app.py`` checks this).

Design notes: ``docs/visualizer.md#warming-the-process``.
"""

from __future__ import annotations

import importlib
import threading

_STARTED = threading.Event()
_DONE = threading.Event()
_LOCK = threading.Lock()


def _warm() -> None:
    try:
        from ..scenarios import common

        common.trained_model()
        _warm_figure()
    finally:  # a failure here shows up, with its message, on the page that needs the same thing
        _DONE.set()


def _warm_figure() -> None:
    """One figure, so plotly's validators load (~0.2 s). plotly looks pandas up in ``sys.modules`` without
    importing it, so a page thread half-way through ``import pandas`` (``st.dataframe``'s first use) makes
    it fail; ``import pandas`` here then waits for that import to end (the module's import lock, nothing
    imported by this thread) and the figure is drawn again."""
    import plotly.graph_objects as go

    try:
        go.Figure(go.Scatter(x=[0], y=[0])).to_json()
    except AttributeError as err:
        if "partially initialized module 'pandas'" not in str(err):
            raise
        import pandas  # noqa: F401 -- being imported by another thread: wait for it

        go.Figure(go.Scatter(x=[0], y=[0])).to_json()


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
