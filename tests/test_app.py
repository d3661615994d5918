"""The Streamlit app, headless (``streamlit.testing.v1.AppTest``): pages run, controls change figures."""

import json
import os
import pathlib

import numpy as np
import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from apptest_util import new_app  # noqa: E402
from model_viz.figures import state_evolution as sf  # noqa: E402
from model_viz.figures import state_evolution as sp_fig  # noqa: E402
from model_viz.scenarios import state_evolution as sp  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
PAGE = "app_pages/state_evolution.py"
TIMEOUT = 60  # the first run imports torch and traces the prompt; two shared CPU cores


def _state_page() -> AppTest:
    at = new_app(APP, TIMEOUT).run()
    at.switch_page(PAGE).run()
    assert not at.exception, at.exception
    return at


def _specs(at) -> dict:
    """Plotly specs of the page's charts by kind: heatmap grid, norm, gate."""
    out = {}
    for el in at.get("plotly_chart"):
        spec = json.loads(el.proto.spec)
        kind = spec["data"][0]["type"]
        if kind == "heatmap":
            out["heatmap"] = spec
        else:
            out.setdefault("lines", []).append(spec)
    return out


def _z(spec) -> np.ndarray:
    return np.array([d["z"] for d in spec["data"] if d["type"] == "heatmap"])


def test_home_page_says_what_the_product_is():
    at = new_app(APP, TIMEOUT).run()
    assert not at.exception
    assert "KDA" in at.title[0].value
    body = " ".join(m.value for m in at.markdown)
    assert "fixed-size recurrent state" in body and "SGLang" in body and "vLLM" in body
    # one caption per listed page, in the page table's order
    from model_viz.i18n import t
    from model_viz.ui.page_index import PAGES

    listed = [p for p in PAGES if p.caption_key is not None]
    assert [c.value for c in at.caption][: len(listed)] == [t(p.caption_key, "en") for p in listed]


def test_page_table_names_real_files_and_strings():
    from model_viz import i18n
    from model_viz.ui.page_index import PAGES

    assert len({p.slug for p in PAGES}) == len(PAGES) == len({p.url_path for p in PAGES})
    for p in PAGES:
        assert (ROOT / p.file).is_file(), p
        assert p.title_key == f"{p.slug}.nav" and p.title_key in i18n.STRINGS
        assert p.caption_key in (None, f"{p.slug}.caption") and (p.caption_key is None or p.caption_key in i18n.STRINGS)


def test_state_page_renders_figures_and_concepts():
    at = _state_page()
    assert at.title[0].value == "KDA state evolution"
    assert not at.error
    specs = _specs(at)
    # heatmaps, then norm and gate lines, and the recall probe (the default prompt is a recall prompt)
    assert len(_z(specs["heatmap"])) == sp.build_model().config.linear_num_heads and len(specs["lines"]) == 3
    assert at.session_state["state_evolution_step"] == 0
    assert at.button(key="state_evolution_prev").disabled and not at.button(key="state_evolution_next").disabled
    labels = [e.label for e in at.expander]
    for cid in sp_fig.PAGE_CONCEPTS:
        assert any(cid in lab for lab in labels), cid
    assert any("kda_ref.state_trace.trace_kda_states" in m.value for m in at.markdown)


def test_next_and_slider_change_the_heatmap():
    at = _state_page()
    z0 = _z(_specs(at)["heatmap"])
    at.button(key="state_evolution_next").click().run()
    assert not at.exception
    assert at.session_state["state_evolution_step"] == 1
    z1 = _z(_specs(at)["heatmap"])
    assert not np.allclose(z0, z1)

    at.slider(key="state_evolution_step").set_value(10).run()
    assert not at.exception
    spec = _specs(at)["heatmap"]
    assert "token 10" in spec["layout"]["title"]["text"]
    # the chart shows exactly the engine's state after token 10 of the default prompt, layer 0
    trace = sp.trace_prompt(sp.build_model(), sp.DEFAULT_PROMPT)
    np.testing.assert_allclose(_z(spec), sf.heatmap_data(trace, trace.layers[0], 10), atol=1e-6)
    zmax = {d["zmax"] for d in spec["data"]}
    assert len(zmax) == 1 and zmax.pop() == pytest.approx(sf.color_limit(trace, trace.layers[0]))

    at.button(key="state_evolution_prev").click().run()
    assert at.session_state["state_evolution_step"] == 9


def test_layer_select_changes_the_figures():
    at = _state_page()
    z_a = _z(_specs(at)["heatmap"])
    at.selectbox(key="state_evolution_layer").set_value(2).run()
    assert not at.exception
    spec = _specs(at)["heatmap"]
    assert "layer 2" in spec["layout"]["title"]["text"]
    assert not np.allclose(z_a, _z(spec))


def test_language_switch_changes_the_text():
    at = _state_page()
    en_md = " ".join(m.value for m in at.markdown)
    at.sidebar.radio[0].set_value("zh").run()
    assert not at.exception
    assert at.title[0].value == "KDA 状态演化"
    zh_md = " ".join(m.value for m in at.markdown)
    assert "固定大小的矩阵" in zh_md and "fixed-size matrix" not in zh_md and "fixed-size matrix" in en_md
    assert at.button(key="state_evolution_next").label == "下一个 ▶"
    # option strings must not change with the language (the browser would lose the selection)
    assert at.selectbox(key="state_evolution_layer").options == ["0  (KDA 1/3)", "1  (KDA 2/3)", "2  (KDA 3/3)"]
    assert "头 0" in json.dumps(_specs(at)["heatmap"]["layout"]["annotations"], ensure_ascii=False)


def test_empty_prompt_shows_an_error_and_nothing_breaks():
    at = _state_page()
    at.text_input(key="state_evolution_prompt").input("").run()
    assert not at.exception
    assert len(at.error) == 1 and "empty" in at.error[0].value
    assert not at.get("plotly_chart")
    assert len(at.expander) == len(sp_fig.PAGE_CONCEPTS)  # the concept panel still renders
    at.text_input(key="state_evolution_prompt").input("back again").run()  # not a recall prompt: no probe chart
    assert not at.exception and not at.error and len(at.get("plotly_chart")) == 3


def test_too_long_prompt_shows_an_error():
    at = _state_page()
    at.text_input(key="state_evolution_prompt").input("数" * 90).run()  # 270 bytes
    assert not at.exception
    assert len(at.error) == 1 and "270" in at.error[0].value


def test_a_shorter_prompt_clamps_the_step():
    at = _state_page()
    at.slider(key="state_evolution_step").set_value(20).run()
    at.text_input(key="state_evolution_prompt").input("abc").run()  # <bos> a b c: the last token is t = 3
    assert not at.exception
    assert at.session_state["state_evolution_step"] == 3
    assert at.button(key="state_evolution_next").disabled
    at.text_input(key="state_evolution_prompt").input("x").run()  # <bos> x: two tokens, no crash
    assert not at.exception and at.session_state["state_evolution_step"] == 1


def test_page_file_runs_on_its_own():
    at = new_app(str(ROOT / PAGE), TIMEOUT).run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 4


def test_recall_probe_appears_only_for_recall_prompts():
    at = _state_page()
    assert any(c.proto.id for c in at.get("plotly_chart")) and at.selectbox(key="state_evolution_probe_head")
    assert len(at.get("plotly_chart")) == 4  # heatmaps, norm, gate, probe
    at.text_input(key="state_evolution_prompt").input("the cat sat on the mat").run()
    assert not at.exception and len(at.get("plotly_chart")) == 3


WARM_UP_CHECK = """
import torch, kda_ref.train as tr
calls = []
real = tr.load_trained
tr.load_trained = lambda **kw: calls.append(kw) or real(**kw)
from model_viz.scenarios import common
from model_viz.ui import warmup
torch.manual_seed(123); want = torch.rand(4); torch.manual_seed(123)
assert warmup.start() is True and warmup.start() is False
assert warmup.wait(120)
assert torch.equal(torch.rand(4), want), "the warm-up drew from torch's global generator"
assert common.trained_model() is common.trained_model(common.CHUNK)
assert len(calls) == 1, calls
print("ok")
"""


# a page's plotly looks pandas and numpy up in sys.modules without importing them: a half-imported one
# there (the warm-up thread in the middle of importing it) failed the page
WARM_UP_IMPORTS = """
import sys, threading
seen = set()
def hook(event, args):
    if event == "import" and threading.current_thread().name == "kda-viz-warmup":
        seen.add(args[0].split(".")[0])
sys.addaudithook(hook)
from model_viz.ui import warmup
assert "numpy" not in sys.modules
warmup.start(); assert warmup.wait(120)
assert "torch" in seen and "plotly" in seen, sorted(seen)
assert not seen & {"numpy", "pandas", "pyarrow"}, sorted(seen & {"numpy", "pandas", "pyarrow"})
print("ok")
"""


WARM_UP_RACE = """
import sys, threading, time
import numpy
importer = threading.Thread(target=lambda: __import__("pandas"))  # a page's st.dataframe, importing pandas
importer.start()
while not ("pandas" in sys.modules and not hasattr(sys.modules["pandas"], "Series")):
    time.sleep(0.01)
from model_viz.ui import warmup
warmup._warm_figure()  # half-imported pandas in sys.modules: the figure waits for it instead of failing
assert hasattr(sys.modules["pandas"], "Series")
importer.join()
print("ok")
"""


def test_the_warm_up_figure_waits_for_a_page_importing_pandas(tmp_path):
    """The warm-up's first figure while a page thread is half-way through ``import pandas`` (plotly looks it
    up in ``sys.modules``): it waited for that import instead of failing with "partially initialized module
    'pandas'" and leaving the rest of the warm-up undone. A slow stand-in for pandas holds the window open."""
    import subprocess
    import sys

    fake = tmp_path / "pandas"
    fake.mkdir()
    (fake / "__init__.py").write_text("import time\ntime.sleep(1.0)\n"
                                      "class Series: pass\nclass Index: pass\nclass DataFrame: pass\n")
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
    proc = subprocess.run([sys.executable, "-c", WARM_UP_RACE], cwd=root, capture_output=True, text=True,
                          timeout=180, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_the_warm_up_thread_imports_nothing_plotly_peeks_at():
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", WARM_UP_IMPORTS], cwd=root, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_the_warm_up_runs_once_shares_the_model_and_draws_no_random_numbers():
    """app.py's background warm-up, in a fresh process: one thread, the model the pages then get is the
    one it loaded, and torch's global generator (a page's scenario may be using it at that moment) is
    untouched."""
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", WARM_UP_CHECK], cwd=root, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_no_pages_folder_beside_app_py():
    """A ``pages/`` folder beside app.py switches Streamlit's first run after a start to its older
    pages-directory navigation: a deep link such as /spec-decode then shows "Page not found"."""
    from model_viz.ui.page_index import PAGES

    root = pathlib.Path(__file__).resolve().parents[1]
    assert not (root / "pages").exists()
    assert all((root / p.file).is_file() and p.file.startswith("app_pages/") for p in PAGES)
