"""Every page where the model matters offers Kimi-Linear and Kimi K3, and shows K3 in English and
Chinese with no exception (headless ``AppTest``)."""

import json
import math
import pathlib

import pytest

pytest.importorskip("streamlit")
from apptest_util import new_app  # noqa: E402

from model_viz.scenarios import checkpoint_density as dn  # noqa: E402

APP = str(pathlib.Path(__file__).resolve().parents[1] / "app.py")


def _k3(slug: str, figures_change: bool = True):
    """The page with Kimi K3 chosen. ``figures_change``: K3's tiny layout has the tiny model's KDA and MLA
    sizes, so a page whose figures show only the engine's schedule and those units draws the same ones
    (its text says what differs)."""
    at = new_app(APP, 90).run()
    at.switch_page(f"app_pages/{slug}.py").run()
    assert not at.exception, at.exception
    before = [el.proto.spec for el in at.get("plotly_chart")], _text(at)
    at.radio(key=f"{slug}_model_family_en").set_value("k3").run()
    assert not at.exception and not at.error, at.exception
    after = [el.proto.spec for el in at.get("plotly_chart")], _text(at)
    assert after[1] != before[1] and (after[0] != before[0] or not figures_change)
    return at


def _text(at) -> str:
    return " ".join(m.value for m in (*at.markdown, *at.info, *at.caption))


def _to_chinese(at, slug: str) -> None:
    at.sidebar.radio[0].set_value("zh").run()
    assert not at.exception and not at.error, at.exception
    assert at.session_state[f"{slug}_model_family"] == "k3"  # the choice survives the language switch
    assert at.radio(key=f"{slug}_model_family_zh").value == "k3"


def test_three_states_shows_k3s_bytes():
    at = _k3("three_states")
    titles = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["annotations"]
    assert any("Kimi K3" in a["text"] for a in titles)
    assert "428.6 MiB" in json.dumps([r for df in at.dataframe for r in df.value.to_dict("records")])
    intro = at.markdown[0].value  # names the two sizes compared, K3's now
    assert "K3 tiny" in intro and "Kimi K3" in intro and "Kimi-Linear-48B" not in intro
    _to_chinese(at, "three_states")
    assert "服务一个请求" in _text(at) and "Kimi K3" in at.markdown[0].value


def test_state_evolution_draws_k3s_gate_floor():
    at = _k3("state_evolution")
    gate = next(json.loads(el.proto.spec) for el in at.get("plotly_chart")
                if "β" in json.dumps(json.loads(el.proto.spec)["layout"], ensure_ascii=False))
    floors = [s for s in gate["layout"]["shapes"] if s.get("line", {}).get("dash") == "dash"]
    assert any(abs(s["y0"] - math.exp(-5.0)) < 1e-9 for s in floors)
    # its label beside it: an annotation on a log axis is placed by log10 of the value
    labels = [a for a in gate["layout"]["annotations"] if "e^-5" in a["text"]]
    assert labels and abs(labels[0]["y"] - math.log10(math.exp(-5.0))) < 1e-9
    assert "e^-5" in _text(at)
    _to_chinese(at, "state_evolution")
    assert "下界" in _text(at)


def test_hybrid_chain_runs_k3():
    at = _k3("hybrid_chain", figures_change=False)
    assert "attention residuals" in _text(at)
    _to_chinese(at, "hybrid_chain")
    assert "注意力残差" in _text(at)


def test_pool_map_runs_k3():
    at = _k3("pool_map", figures_change=False)
    assert "Kimi K3's sizes: one state slot is 428.6 MiB" in _text(at)
    _to_chinese(at, "pool_map")
    assert "428.6 MiB" in _text(at)


def test_checkpoint_density_prices_k3():
    at = _k3("checkpoint_density")
    mib = dn.cost_facts(dn.cost_model("k3"))["state_mib"]
    assert any(m.value == f"{mib:.1f} MiB" for m in at.metric)
    assert "Kimi K3" in _text(at) and "69 KDA layers" in _text(at)
    _to_chinese(at, "checkpoint_density")
