"""Open one page of the app headless (``streamlit.testing.v1.AppTest``), in a language."""

from __future__ import annotations

import functools
import json
import pathlib

APP = str(pathlib.Path(__file__).resolve().parents[1] / "app.py")


@functools.cache
def _scan_installed_components_once() -> None:
    """Every new ``AppTest`` scans the metadata of every installed distribution for Streamlit v2
    components (``streamlit.components.v2.manifest_scanner.scan_component_manifests``): ~0.1 s each,
    about 70 times in the suite. The installed packages do not change while the tests run, so the
    scan's answer is kept for the process."""
    from streamlit.components.v2 import manifest_scanner

    manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)


def new_app(script: str = APP, timeout: float = 90):
    """A headless ``AppTest`` of ``script`` (the app by default), not yet run."""
    from streamlit.testing.v1 import AppTest

    _scan_installed_components_once()
    return AppTest.from_file(script, default_timeout=timeout)


def open_page(page_file: str, lang: str = "en", timeout: float = 90):
    """``app.py`` run, then ``page_file`` (e.g. ``"app_pages/swa_vs_kda.py"``), then the sidebar's
    language switch set to ``lang``; fails if any of it raised. This thread then reads in ``lang`` too:
    ``AppTest`` calls a widget's ``format_func`` here, and it must label options as the page did."""
    from model_viz.i18n import language, use_language

    with language("en"):  # the app opens in English
        at = new_app(APP, timeout).run()
        at.switch_page(page_file).run()
        if lang != "en":
            at.sidebar.radio[0].set_value(lang).run()
    use_language(lang)
    assert not at.exception, at.exception
    return at


def chart_specs(at) -> list[dict]:
    """The plotly specs of the page's charts, in page order."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
