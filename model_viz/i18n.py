"""UI strings in English and Chinese, and :func:`t` to look one up.

The strings are data: ``model_viz/data/strings.en.json`` and ``strings.zh.json``, one file per language, each
``{key: text}``. A key is ``<namespace>.<name>``: ``common`` for what every page shares (step controls, the
concept panel, trace uploads) and one namespace per page, named by the page's slug (``three_states``,
``checkpoint_tree``, ...) -- the slug that also names its file in ``app_pages/``, its modules in
:mod:`model_viz.scenarios` / :mod:`model_viz.figures`, its widget keys (``<slug>_...``) and its URL. Every
key appears as a whole literal in the code that uses it, so a test can find keys nothing uses and keys
that do not exist (``tests/test_i18n.py``).

Both files hold the same keys with the same ``{placeholders}``. A missing key or language raises
``KeyError``: a typo fails loudly in tests instead of showing an empty label. Concept titles and
explanations are the concept map's data (:mod:`model_viz.concepts`), not here.
"""

from __future__ import annotations

import json
from pathlib import Path

from .ui.page_index import PAGES

LANGS = ("en", "zh")
LANG_LABELS = {"en": "English", "zh": "中文"}
DEFAULT_LANG = "en"

# the namespaces of the keys: common, then one per page in navigation order (a page's slug is its namespace:
# model_viz.ui.page_index lists them once)
NAMESPACES = ("common", *(p.slug for p in PAGES))
DATA = Path(__file__).resolve().parent / "data"


def _load() -> dict[str, dict[str, str]]:
    """``{key: {lang: text}}`` from the language files; a key outside the namespaces, or one file's key missing
    from the other, is a ``ValueError`` at import."""
    files = {lang: json.loads((DATA / f"strings.{lang}.json").read_text(encoding="utf-8")) for lang in LANGS}
    keys = files[LANGS[0]].keys()
    for lang, texts in files.items():
        if texts.keys() != keys:
            raise ValueError(f"i18n: strings.{lang}.json and strings.{LANGS[0]}.json hold different keys: "
                             f"{sorted(texts.keys() ^ keys)[:5]}")
    outside = [k for k in keys if k.split(".", 1)[0] not in NAMESPACES]
    if outside:
        raise ValueError(f"i18n: keys outside every namespace {NAMESPACES}: {outside[:5]}")
    return {key: {lang: files[lang][key] for lang in LANGS} for key in keys}


STRINGS: dict[str, dict[str, str]] = _load()


def t(key: str, lang: str = DEFAULT_LANG, **fmt) -> str:
    """The string ``key`` in ``lang``, formatted with ``fmt`` when given.

    Raises ``KeyError`` for an unknown key or language (never falls back silently).
    """
    if lang not in LANGS:
        raise KeyError(f"lang: unknown language {lang!r}; expected one of {LANGS}")
    try:
        entry = STRINGS[key]
    except KeyError:
        raise KeyError(f"i18n: no string with key {key!r}") from None
    text = entry[lang]
    return text.format(**fmt) if fmt else text


def plural(n: int, one: str, many: str, lang: str = DEFAULT_LANG, **fmt) -> str:
    """The string ``one`` when ``n == 1``, else ``many``, formatted with ``n`` and ``fmt``: "1 sequence",
    "3 sequences" (Chinese strings give both keys the same text)."""
    return t(one if n == 1 else many, lang, n=n, **fmt)


class LocalizedError(ValueError):
    """An input a page cannot use, carrying the i18n key (and fields) of its message: ``str(e)`` is
    the English text, :meth:`message` the text in the page's language."""

    def __init__(self, key: str, **fmt):
        self.key, self.fmt = key, fmt
        super().__init__(t(key, "en", **fmt))

    def message(self, lang: str) -> str:
        return t(self.key, lang, **self.fmt)
