"""What the pages say matches what they show, in the language they show it in.

* The compressed-checkpoints page: an fp32 restore is the saved state bit for bit and keeps B's tokens;
  the small logit difference it still shows is there without any cache too, and the page says why.
* Every UI string and the concept map render in CommonMark as written: no ``**`` left unclosed (a
  closing ``**`` after a full-width colon and before a letter is not a closer), no ``_`` emphasis
  made out of an identifier.
* English strings hold no Chinese; the home page's captions are in sentence case; Streamlit's own
  (English-only) "View N more" never appears in the navigation.
* The pool map's first view is a layout the engine accepts; the refused ones are a pick away.
* The Lab's conversation box says it holds the turns of one conversation, its default turns build on
  each other, and a comparison downloads both configurations' traces.
"""

from __future__ import annotations

import ast
import html
import pathlib
import re

import pytest
import torch

from apptest_util import chart_specs, open_page
from model_viz import concepts, i18n
from model_viz.i18n import t
from model_viz.i18n import in_language

ROOT = pathlib.Path(__file__).resolve().parents[1]
STRING_FILES = sorted((ROOT / "model_viz" / "strings").glob("*.py"))

#: keys whose text is fixed in a strings file this suite does not own: each entry must still be
#: broken (the test below fails once it is fixed, so the entry is removed), never added to lightly


# ---- 1. compressed checkpoints: fp32 restores exactly -------------------------------------------------------
@pytest.fixture(scope="module")
def trained_runs():
    from model_viz.scenarios import compressed_checkpoints as cc

    return cc.run("trained", 16)


def test_an_fp32_restore_is_the_saved_state_bit_for_bit_and_keeps_the_tokens(trained_runs):
    from model_viz.scenarios import compressed_checkpoints as cc

    fp32, bf16, int8 = trained_runs
    assert fp32.restore_exact and fp32.layer_error == [0.0] * len(fp32.layer_error)
    assert fp32.tokens == fp32.ref_tokens and max(fp32.logit_diff) <= cc.EXACT_TOL
    assert not bf16.restore_exact and not int8.restore_exact
    assert 0 < max(bf16.layer_error) < min(int8.layer_error)
    # what fp32's logits still differ by is no checkpoint's: two runs without any cache, B prefilled in
    # one forward and in two (stopping where the checkpoint is), differ as well
    split = cc.split_drift("trained", 16)
    assert (max(fp32.logit_diff) > 0) <= (split > 0) and split <= cc.EXACT_TOL


def test_the_restore_the_page_measures_is_the_pools_own_copy():
    """The pool's restore of an fp32 checkpoint copies the state slot bit for bit (recurrent and conv)."""
    from kda_ref import LLM
    from kda_ref.memory import PageKind
    from model_viz.scenarios import common as cs
    from model_viz.scenarios import compressed_checkpoints as cc

    a, _ = cc.prompts()
    llm = LLM(cc.page_model("random"), prefix_cache="radix", chunk_size=cs.CHUNK, checkpoint_policy="chunk")
    llm.generate([a], cs.params(1))
    pool = llm.pool
    node = next(n for p, n in cs.path_states(llm.prefix_cache.tree, a) if p == cc.SYSTEM_LEN)
    (slot,) = pool.alloc(PageKind.KDA_STATE, 1, "test")
    pool.restore_checkpoint(node.state, slot)
    assert torch.equal(pool.tensors.recurrent[:, slot], pool.tensors.recurrent[:, node.state])
    assert torch.equal(pool.tensors.conv[:, slot], pool.tensors.conv[:, node.state])


def test_the_compressed_checkpoints_texts_say_what_is_measured():
    for lang in i18n.LANGS:
        watch = t("compressed_checkpoints.watch", lang)
        assert ("bit for bit" if lang == "en" else "逐位") in watch.split("\n")[0]
    assert "restore error is 0" not in t("compressed_checkpoints.watch", "en")
    assert "restored vs saved" in t("compressed_checkpoints.col.layer_err", "en")
    assert "S_saved" in t("compressed_checkpoints.fig.layer_y", "en")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_shows_restore_error_0_and_explains_the_logit_difference(lang):
    from model_viz.scenarios import compressed_checkpoints as cc

    at = open_page("app_pages/compressed_checkpoints.py", lang, timeout=180)
    at.slider(key="compressed_checkpoints_steps").set_value(16).run()
    assert not at.exception
    runs = cc.run("trained", 16)
    df = at.dataframe[0].value
    assert df[t("compressed_checkpoints.col.layer_err", lang)].iloc[0] == "0.0e+00"
    drift = df[t("compressed_checkpoints.col.drift", lang)].iloc[0]
    assert drift == f"{max(runs[0].logit_diff):.1e}"
    note = t("compressed_checkpoints.exact_note", lang, fp32=drift, S=cc.SYSTEM_LEN,
             split=f"{cc.split_drift('trained', 16):.1e}")
    assert note in [c.value for c in at.caption]


# ---- 2. CommonMark renders every string as written -----------------------------------------------------------
def _texts():
    """(where, markdown) for every UI string in both languages and every concept's title, summary and panel."""
    for key, entry in i18n.STRINGS.items():
        for lang, text in entry.items():
            yield (key, lang), text
    for cid, c in concepts.CONCEPTS.items():
        for lang in i18n.LANGS:
            yield (cid, lang), c.title[lang]
            yield (cid, lang), in_language(lang, concepts.concept_markdown, cid)


def _filled(text: str) -> str:
    """Placeholders filled with a number, as the pages fill most of them (``{n}``, ``{d:.1e}``)."""
    return re.sub(r"\{[A-Za-z_][A-Za-z0-9_]*(?:[:!][^{}]*)?\}", "7", text)


def _md():
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark")


def _unclosed_bold(md, text: str) -> bool:
    """``**`` left in the rendered text outside code: an emphasis CommonMark did not close."""
    out = md.render(_filled(text))
    out = re.sub(r"<pre>.*?</pre>|<code>.*?</code>", "", out, flags=re.S)
    return "**" in html.unescape(re.sub(r"<[^>]+>", "", out))


def _underscore_emphasis(md, text: str) -> bool:
    """Emphasis delimited by ``_``: the strings emphasise with ``*``, so this is an identifier read as italics."""
    return any(ch.type in ("em_open", "strong_open") and ch.markup.startswith("_")
               for tok in md.parse(_filled(text)) for ch in (tok.children or []))


def test_every_bold_closes_in_commonmark():
    md = _md()
    bad = sorted({where for where, text in _texts() if _unclosed_bold(md, text)})
    assert not bad, f"** that CommonMark does not close (move a full-width colon outside: **X**：): {bad}"


def test_no_identifier_turns_into_italics():
    md = _md()
    bad = sorted({where for where, text in _texts() if _underscore_emphasis(md, text)})
    assert not bad, f"_ read as emphasis (put the identifier in backticks): {bad}"


def test_the_checks_catch_what_they_are_for():
    md = _md()
    assert _unclosed_bold(md, "**MLA KV：**这个前缀") and not _unclosed_bold(md, "**MLA KV**：这个前缀")
    assert not _unclosed_bold(md, "**fp32 是精确的。** 恢复") and not _unclosed_bold(md, "`2**(e-127)`")
    assert _underscore_emphasis(md, "Base._forward_metadata and Backend.forward_*")
    assert not _underscore_emphasis(md, "`Base._forward_metadata` and `Backend.forward_*`")


def test_no_strings_file_defines_a_key_twice():
    """A dict literal keeps the last of two equal keys without a word: the first text is silently dead."""
    for path in STRING_FILES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                twice = sorted({k for k in keys if keys.count(k) > 1})
                assert not twice, f"{path.name}: {twice} defined twice"


# ---- 3. English is English -------------------------------------------------------------------------------------
CJK = re.compile(r"[\u2e80-\u9fff\u3000-\u303f\uf900-\ufaff\uff00-\uffef]")
#: English strings that may hold Chinese on purpose: none. (The language switch's own label,
#: "Language / 语言", and its "中文" option live in ``app.py`` / ``model_viz.i18n.LANG_LABELS``, outside
#: the strings: each language's name is written in that language.)
CJK_IN_ENGLISH_ALLOWED: frozenset[str] = frozenset()


def test_no_english_string_holds_chinese():
    bad = [key for key, entry in i18n.STRINGS.items() if CJK.search(entry["en"])]
    bad += [cid for cid, c in concepts.CONCEPTS.items()
            if CJK.search(c.title["en"]) or CJK.search(in_language("en", concepts.concept_markdown, cid))]
    assert not sorted(set(bad) - CJK_IN_ENGLISH_ALLOWED), bad
    assert i18n.LANG_LABELS == {"en": "English", "zh": "中文"}
    assert concepts.get("state.mla_kv").title["en"] == "MLA latent KV cache"


# ---- 4. navigation and captions --------------------------------------------------------------------------------
def test_the_navigation_lists_every_page():
    """``st.navigation(..., expanded=True)``: no "View N more" button, which Streamlit writes in English."""
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "navigation"]
    assert len(calls) == 1
    expanded = {k.arg: k.value for k in calls[0].keywords}.get("expanded")
    assert isinstance(expanded, ast.Constant) and expanded.value is True


def test_the_home_page_captions_are_in_sentence_case():
    from model_viz.ui.page_index import PAGES

    for p in PAGES:
        for key in (p.title_key, p.caption_key):
            if key is None:
                continue
            first = t(key, "en").split()[0]  # a capital, or a name spelled with its own capitals (vLLM)
            assert first[0].isupper() or any(c.isupper() for c in first[1:]), f"{key}: {first!r} is lower case"
        if p.caption_key:
            assert t(p.caption_key, "en").endswith("."), p.caption_key


# ---- 5. the pool map opens on a layout the engine accepts ------------------------------------------------------
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_pool_maps_first_view_has_no_refusal(lang):
    from model_viz.scenarios import pool_map as pm

    at = open_page("app_pages/pool_map.py", lang)
    assert not at.warning and not at.error
    budget, rows = pm.demand_rows(pm.DEFAULT_PAGES)
    accepted = pm.accepted_labels(rows)
    assert accepted and len(accepted) < len(rows)  # the page has refused settings to offer
    demand = chart_specs(at)[3]
    assert {d["y"][0] for d in demand["data"]} == {t(k, lang) for k in accepted}
    notes = [a.get("text", "") for a in demand["layout"].get("annotations", [])]
    assert not any(t("pool_map.demand.refused", lang).strip() in n for n in notes)
    assert any(t(r["label"], lang) in c.value for c in at.caption for r in rows if not r["fits"])
    # the refused ones stay selectable: picked, each shows the engine's refusal, and the chart marks it
    ms = at.multiselect(key="pool_map_demand_settings")
    for r in rows:
        if not r["fits"]:
            ms = ms.select(r["label"])
    ms.run()
    refused = [r for r in rows if not r["fits"]]
    assert len(at.warning) == len(refused)
    assert all(w.value.startswith(f"**{t(r['label'], lang)}** — {t('pool_map.demand.refused_by', lang)}")
               for w, r in zip(at.warning, refused))
    notes = [a.get("text", "") for a in chart_specs(at)[3]["layout"].get("annotations", [])]
    assert notes.count(t("pool_map.demand.refused", lang)) == len(refused)


# ---- 6. the Lab's conversation ---------------------------------------------------------------------------------
def test_the_labs_conversation_box_holds_turns_that_build_on_each_other():
    from model_viz.scenarios import lab

    at = open_page("app_pages/lab.py", "en")
    assert at.text_area(key="lab_prompts").label.startswith("prompts,")
    at.radio(key="lab_source_en").set_value("conversation").run()
    box = at.text_area(key="lab_turns")
    assert box.label == t("lab.turns_label", "en", max=lab.LIMITS.requests, bytes=lab.LIMITS.prompt_bytes)
    assert "conversation" in box.label and not at.get("text_area")[0].label.startswith("prompts")
    turns = lab.split_prompts(box.value)
    assert len(turns) == 3 and turns == lab.split_prompts(t("lab.turns_default", "en"))
    assert "it" in turns[1].lower().split() and "it?" in turns[2]  # each turn refers back to the one before
    at.slider(key="lab_max_tokens").set_value(4).run()
    at.button(key="lab_run").click().run(timeout=180)
    assert not at.exception and not at.error
    run = at.session_state["lab_result"]["runs"]["A"]
    assert run.header["mode"] == "conversation"
    for before, after, out in zip(run.prompts, run.prompts[1:], run.outputs):
        assert after[:len(before) + len(out.token_ids)] == [*before, *out.token_ids]  # the history resent
    assert run.stats["cached_prompt_tokens"] > 0  # and the radix cache reuses it


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_comparison_downloads_both_configurations(lang):
    at = open_page("app_pages/lab.py", lang)
    at.text_area(key="lab_prompts").set_value("The state is\n---\nThe state is a matrix").run()
    at.slider(key="lab_max_tokens").set_value(4).run()
    at.button(key="lab_run").click().run(timeout=180)
    assert [b.key for b in at.get("download_button")] == ["lab_dl_jsonl", "lab_dl_chrome"]  # one run: its own
    at.checkbox(key="lab_compare").check().run()
    at.button(key="lab_run").click().run(timeout=180)
    assert not at.exception and not at.error
    buttons = at.get("download_button")
    assert [b.proto.label for b in buttons] == [
        t("lab.download_jsonl_run", lang, run="A"), t("lab.download_chrome_run", lang, run="A"),
        t("lab.download_jsonl_run", lang, run="B"), t("lab.download_chrome_run", lang, run="B")]
    assert len({b.proto.url for b in buttons}) == 4  # four different files
    assert t("lab.download_both", lang) in [c.value for c in at.caption]
    at.radio(key=f"lab_shown_{lang}").set_value("B").run()  # showing B downloads both still
    assert [b.proto.label for b in at.get("download_button")] == [b.proto.label for b in buttons]


# ---- what every page renders, as a reader sees it --------------------------------------------------------
def _rendered(at) -> list[str]:
    """The main area's texts of a rendered page (markdown, captions, titles, callouts; not the sidebar, which
    holds the language switch)."""
    kinds = ("markdown", "caption", "title", "header", "subheader", "info", "warning", "error", "success")
    return [el.value for kind in kinds for el in getattr(at.main, kind) if isinstance(el.value, str)]


TEXT_PAGES = {p.slug: p.file for p in __import__("model_viz.ui.page_index", fromlist=["PAGES"]).PAGES}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("slug", sorted(TEXT_PAGES))
def test_every_page_reads_right_in_its_language(slug, lang):
    """English pages show no Chinese (the language switch lives in the sidebar); no page shows an emphasis
    that CommonMark leaves as literal asterisks."""
    at = open_page(TEXT_PAGES[slug], lang, timeout=180)
    md = _md()
    texts = _rendered(at)
    assert texts, slug
    if lang == "en":
        assert not [x for x in texts if CJK.search(x)], [x[:80] for x in texts if CJK.search(x)]
    assert not [x for x in texts if _unclosed_bold(md, x)], [x[:80] for x in texts if _unclosed_bold(md, x)]
