"""The "Compressed checkpoints" page (docs/article.md 5.3): the engine's own bytes, restore errors and
drift for fp32 / bf16 / int8 checkpoints of the same state."""

import math

import pytest
from apptest_util import chart_specs, open_page

from model_viz.figures import compressed_checkpoints as cc_fig
from model_viz.scenarios import compressed_checkpoints as cc
from model_viz.i18n import in_language


@pytest.fixture(scope="module")
def random_runs():
    return cc.run("random", 32)


def test_fp32_is_exact_and_compression_is_smaller_and_lossy(random_runs):
    fp32, bf16, int8 = random_runs
    assert [r.dtype for r in random_runs] == list(cc.DTYPES)
    assert max(fp32.layer_error) <= 1e-6 and fp32.tokens == fp32.ref_tokens and fp32.first_divergence is None
    assert int8.bytes_tiny < bf16.bytes_tiny < fp32.bytes_tiny
    # bf16 rounds each value to 8 significant bits; int8 to 127 levels per (head, key channel)
    assert 1e-4 < max(bf16.layer_error) < 2 ** -8
    assert max(bf16.layer_error) < min(int8.layer_error) < 0.05
    assert max(fp32.logit_diff) < max(bf16.logit_diff) and max(fp32.logit_diff) < max(int8.logit_diff)
    assert all(r.restored_at == cc.SYSTEM_LEN and r.stats["cached_prompt_tokens"] >= cc.SYSTEM_LEN
               for r in random_runs)


def test_48b_bytes_follow_the_codecs():
    assert cc.bytes_48b("fp32") == 20 * (32 * 128 * 128 * 4 + 3 * 4096 * 3 * 2)
    assert cc.bytes_48b("bf16") == 20 * (32 * 128 * 128 * 2 + 3 * 4096 * 3 * 2)
    assert cc.bytes_48b("int8") == 20 * (32 * 128 * 128 + 32 * 128 * 4 + 3 * 4096 * 3 * 2)


def test_drift_is_reported_up_to_the_first_divergence(random_runs):
    for r in random_runs:
        first = r.first_divergence
        assert len(r.logit_diff) == (len(r.tokens) if first is None else first + 1)
        assert 0 < r.agreement <= 1 and (first is None) == (r.agreement == 1.0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="model"):
        cc.run("huge", 8)
    with pytest.raises(ValueError, match="steps"):
        cc.run("random", 0)
    with pytest.raises(ValueError, match="steps"):
        cc.run("random", cc.MAX_STEPS + 1)


def test_table_and_tokens(random_runs):
    rows = in_language("zh", cc_fig.summary_rows, random_runs)
    assert len(rows) == 3 and rows[0]["checkpoint 数据类型"] == "fp32" and rows[0]["第一个不同的 token"] == "无"
    assert rows[2]["Kimi-Linear-48B MiB"] == "11.7"
    html = in_language("en", cc_fig.token_table_html, random_runs)
    assert html.count("<div>") == 4 and "ref" in html
    assert ("line-through" in html) == any(r.first_divergence is not None for r in random_runs)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_page_renders_the_engine_numbers(lang):
    pytest.importorskip("streamlit")
    at = open_page("app_pages/compressed_checkpoints.py", lang, timeout=120)
    at.radio(key=f"compressed_checkpoints_model_{lang}").set_value("random").run()
    at.slider(key="compressed_checkpoints_steps").set_value(16).run()
    assert not at.exception
    runs = cc.run("random", 16)
    spec = chart_specs(at)[0]
    bars = [d for d in spec["data"] if d["type"] == "bar"]
    assert [b["name"] for b in bars] == list(cc.DTYPES)
    assert bars[2]["y"] == pytest.approx(runs[2].layer_error)
    df = at.dataframe[0].value
    assert list(df.iloc[:, 0]) == list(cc.DTYPES)
    labels = [e.label for e in at.expander]
    assert all(any(cid in lab for lab in labels) for cid in cc_fig.PAGE_CONCEPTS)
    assert at.title[0].value == ("Compressed checkpoints" if lang == "en" else "压缩 checkpoint")
    other = "zh" if lang == "en" else "en"
    at.sidebar.radio[0].set_value(other).run()  # the model chosen survives a language switch
    assert not at.exception and at.radio(key=f"compressed_checkpoints_model_{other}").value == "random"


def test_the_promise_table_and_its_arguments():
    """The measured promise's table (one row per cache and dtype, answers changed out of the requests
    served) from given rows, and a stream size off the page's list refused by name before anything runs;
    the measurement itself runs once, through the page (next test)."""
    rows = [{"cache": c, "dtype": d, "requests": 12, "hits": 7, "answers_changed": 0 if d == "fp32" else 3}
            for c in ("radix", "block") for d in cc.DTYPES]
    table = in_language("en", cc_fig.promise_rows, rows)
    assert table[0]["answers changed"] == "0 / 12 (0.0%)" and table[1]["answers changed"] == "3 / 12 (25.0%)"
    assert [r["prefix cache"] for r in table] == ["radix"] * len(cc.DTYPES) + ["block"] * len(cc.DTYPES)
    with pytest.raises(ValueError, match="requests"):
        cc.answers_changed("random", 13)


def test_the_page_measures_the_promise_fp32_keeps_every_answer():
    """The promise measured on demand: a stream of requests that restore checkpoints, every answer against
    the request run alone. fp32 changes none (else the run raises); most requests restored a checkpoint;
    the lossy dtypes' counts are what they are."""
    at = open_page("app_pages/compressed_checkpoints.py", "en")
    at.select_slider(key="compressed_checkpoints_requests").set_value(12).run(timeout=120)
    at.button(key="compressed_checkpoints_promise").click().run(timeout=180)
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "answers changed" in d.value.columns)
    assert list(table["prefix cache"]) == ["radix"] * 3 + ["block"] * 3
    assert list(table["checkpoint dtype"]) == list(cc.DTYPES) * 2
    assert all(h >= 6 for h in table["prefix hits"])  # most of the stream restored a checkpoint
    assert all(v.endswith(")") and " / 12 " in v for v in table["answers changed"])
    assert all(v.startswith("0 / 12") for v, d in zip(table["answers changed"], table["checkpoint dtype"]) if d == "fp32")


def test_int8_keeps_a_rows_finite_values_beside_an_inf_or_nan_and_the_fp32_maximum_finite():
    """The scale was the row's largest magnitude, inf when one value was: every value of the row came back
    NaN. And 127 x (max / 127) rounded past the fp32 maximum, to inf."""
    import torch

    from kda_ref.memory.checkpoint_store import INT8

    def round_trip(values):
        return INT8.dequantise(*INT8.quantise(torch.tensor([[[values]]]))).flatten().tolist()

    got = round_trip([1.0, 2.0, float("inf"), -4.0])
    assert all(math.isfinite(v) for v in got) and abs(got[1] - 2.0) < 0.05 and got[2] == 4.0 and got[3] == -4.0
    got = round_trip([1.0, float("nan"), 4.0, 0.0])
    assert got[1] == 0.0 and abs(got[2] - 4.0) < 1e-6
    top = torch.finfo(torch.float32).max
    assert round_trip([top, 1.0, 0.0, 0.0])[0] == top
