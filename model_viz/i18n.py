"""UI strings in English and Chinese, and :func:`t` to look one up.

The strings are data: ``model_viz/data/strings.en.json`` and ``strings.zh.json``, each ``{key: text}``,
keys ``<namespace>.<name>`` (``common`` or a page's slug). The language is set once where a page starts
(:func:`use_language`) and read from a per-thread context variable (:func:`current_language`); a script
says ``with language("zh"):``. A missing key or language raises ``KeyError``.

Design notes: ``docs/visualizer.md#strings-and-the-language``.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from contextvars import ContextVar
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
_LANG: ContextVar[str] = ContextVar("kda_viz_lang", default=DEFAULT_LANG)


def _checked(lang: str) -> str:
    if lang not in LANGS:
        raise KeyError(f"lang: unknown language {lang!r}; expected one of {LANGS}")
    return lang


def use_language(lang: str) -> None:
    """Draw in ``lang`` from here on (in this thread): what ``app.py`` calls once per run of a page."""
    _LANG.set(_checked(lang))


def current_language() -> str:
    """The language set by :func:`use_language` or :func:`language` (English when none was)."""
    return _LANG.get()


@contextmanager
def language(lang: str):
    """Draw in ``lang`` inside the block, then in the language before it (tests, scripts)."""
    token = _LANG.set(_checked(lang))
    try:
        yield lang
    finally:
        _LANG.reset(token)


def in_language(lang: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` drawn in ``lang`` (one call of :func:`language`'s block: the tests compare the
    two languages' figures side by side with it)."""
    with language(lang):
        return fn(*args, **kwargs)


def t(key: str, lang: str | None = None, **fmt) -> str:
    """The string ``key`` in ``lang`` (the current language when None), formatted with ``fmt`` when given.

    Raises ``KeyError`` for an unknown key or language (never falls back silently).
    """
    lang = _LANG.get() if lang is None else lang
    if lang not in LANGS:
        raise KeyError(f"lang: unknown language {lang!r}; expected one of {LANGS}")
    try:
        entry = STRINGS[key]
    except KeyError:
        raise KeyError(f"i18n: no string with key {key!r}") from None
    text = entry[lang]
    return text.format(**fmt) if fmt else text


def plural(n: int, one: str, many: str, lang: str | None = None, **fmt) -> str:
    """The string ``one`` when ``n == 1``, else ``many``, formatted with ``n`` and ``fmt``: "1 sequence",
    "3 sequences" (Chinese strings give both keys the same text)."""
    return t(one if n == 1 else many, lang, n=n, **fmt)


class LocalizedError(ValueError):
    """An input a page cannot use, carrying the i18n key (and fields) of its message: ``str(e)`` is
    the English text, :meth:`message` the text in the page's language."""

    def __init__(self, key: str, **fmt):
        self.key, self.fmt = key, fmt
        super().__init__(t(key, "en", **fmt))

    def message(self) -> str:
        return t(self.key, **self.fmt)
