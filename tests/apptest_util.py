"""Open one page of the app headless (``streamlit.testing.v1.AppTest``), in a language."""

from __future__ import annotations

import json
import pathlib

APP = str(pathlib.Path(__file__).resolve().parents[1] / "app.py")


def open_page(page_file: str, lang: str = "en", timeout: float = 90):
    """``app.py`` run, then ``page_file`` (e.g. ``"app_pages/swa_vs_kda.py"``), then the sidebar's
    language switch set to ``lang``; fails if any of it raised."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=timeout).run()
    at.switch_page(page_file).run()
    if lang != "en":
        at.sidebar.radio[0].set_value(lang).run()
    assert not at.exception, at.exception
    return at


def chart_specs(at) -> list[dict]:
    """The plotly specs of the page's charts, in page order."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
