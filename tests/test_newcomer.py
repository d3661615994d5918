"""What a newcomer reads and meets first is true: the README's page count, the getting-started snippet's
claim, the home page, the language kept in the address, plurals, no template placeholder left in the
docs, no Chinese in the English interface."""

from __future__ import annotations

import pathlib
import re

import pytest

from model_viz.i18n import STRINGS, t
from model_viz.ui.page_index import PAGES

ROOT = pathlib.Path(__file__).resolve().parents[1]
CJK = re.compile(r"[\u3000-\u9fff\uff00-\uffef]")


def test_the_readme_counts_the_apps_pages():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    n = int(re.search(r"the Streamlit app, (\d+) pages", readme).group(1))
    assert n == len([p for p in PAGES if p.slug != "home"])


def test_the_getting_started_snippet_shows_the_reuse_it_talks_about(tmp_path, monkeypatch):
    """Step 2's code, run as written: the second request restores the first one's checkpoint."""
    doc = (ROOT / "docs" / "getting_started.md").read_text(encoding="utf-8")
    step2 = doc[doc.index("## 2."):]
    code = re.search(r"```python\n(.*?)```", step2, re.S).group(1)
    monkeypatch.chdir(tmp_path)  # it writes run.jsonl
    scope: dict = {"print": lambda *a, **k: None}
    exec(compile(code, "getting_started.md", "exec"), scope)  # noqa: S102 -- the project's own doc
    assert scope["llm"].stats()["cached_prompt_tokens"] > 0 and (tmp_path / "run.jsonl").is_file()
    assert 'pip install torch==2.13.0 -e ".[serve]"' in doc  # step 2's server needs the extra


def test_no_template_placeholder_is_left_in_the_docs():
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert not re.fullmatch(r"\s*\{[a-z_]+\}\s*", line), f"{path.name}:{n}: {line.strip()}"


def test_the_english_interface_has_no_chinese():
    bad = [k for k, v in STRINGS.items() if CJK.search(v["en"])]
    assert not bad, bad


def test_the_home_page_and_captions_say_what_the_pages_have():
    from kda_ref.cache.radix import CHECKPOINT_POLICIES

    for lang in ("en", "zh"):
        assert "Kimi K3" in t("home.body", lang)
        caption = t("checkpoint_tree.caption", lang)
        assert all(p in caption for p in CHECKPOINT_POLICIES), caption
    assert "five policies" in t("checkpoint_tree.caption", "en") and len(CHECKPOINT_POLICIES) == 5


def test_the_speculation_checkbox_names_every_drafter_the_form_offers():
    from model_viz.scenarios import lab

    choices = next(f["choices"] for f in lab.form_fields()["speculative"] if f["key"] == "speculative")
    label = t("lab.spec_label", "en").lower()
    assert all(("n-gram" if c == "ngram" else c) in label for c in choices), (choices, label)


def test_counts_agree_with_their_nouns():
    from model_viz.i18n import plural

    assert plural(1, "hybrid_chain.n_seqs.one", "hybrid_chain.n_seqs.many", "en") == "1 sequence"
    assert plural(3, "hybrid_chain.n_seqs.one", "hybrid_chain.n_seqs.many", "en") == "3 sequences"
    assert plural(1, "spec_decode.static.pad_rows.one", "spec_decode.static.pad_rows.many", "en") == "1 PAD row"
    assert plural(1, "checkpoint_tree.n_states.one", "checkpoint_tree.n_states.many", "en") == "1 checkpoint"


@pytest.mark.parametrize("url_lang", ["zh", "en"])
def test_the_language_lives_in_the_address(url_lang):
    """A deep link or a reload with ?lang=zh opens in Chinese; switching the language writes it back."""
    from apptest_util import new_app

    at = new_app()
    at.query_params["lang"] = url_lang
    at.run()
    assert not at.exception and at.session_state["lang"] == url_lang
    other = "en" if url_lang == "zh" else "zh"
    at.sidebar.radio[0].set_value(other).run()
    assert at.query_params.get("lang") in ([other], other)
