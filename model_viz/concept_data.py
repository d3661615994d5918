"""The concept map's data, read from ``model_viz/data/``: every idea of the article, where it lives here and
upstream.

* ``concepts.json`` -- what does not depend on the language: each concept's id, the sections of
  ``docs/article.md`` it comes from, our implementation (an importable dotted path) and its pointers into
  SGLang, vLLM, flash-linear-attention and Marconi (file, symbol, the repository and the commit the file was
  read at; ``null`` where that system has no counterpart).
* ``concepts.en.json`` and ``concepts.zh.json`` -- the prose, one file per language, keyed by id: each
  concept's title and summary, and each pointer's notes under ``"<concept id>.<column>.detail"`` (what to
  look at there) and ``".note"`` (why it is not located, or what a reader should know).
  ``tests/test_viz_concepts.py`` checks that both files hold the same keys and the same placeholders.

Every located pointer was checked against the stored copies of sgl-project/sglang, vllm-project/vllm and
fla-org/flash-linear-attention in 2026-12 (where the stored upstream copy of a file was too old to hold a
symbol, the pointer names the fork whose copy was read); pointers that could not be confirmed are
``NOT_LOCATED`` with the reason. The records are :class:`~model_viz.concept_types.Concept` /
:class:`~model_viz.concept_types.SourceRef`; a pointer carries its English notes and the ``key`` its notes
have in every language file (:func:`model_viz.concepts.note_text`).
"""

from __future__ import annotations

import json
from pathlib import Path

from .concept_types import Concept, SourceRef

DATA = Path(__file__).resolve().parent / "data"
REF_COLUMNS = ("sglang", "vllm", "fla", "marconi")


def _read(name: str):
    return json.loads((DATA / name).read_text(encoding="utf-8"))


STRUCTURE: list[dict] = _read("concepts.json")
PROSE: dict[str, dict] = {lang: _read(f"concepts.{lang}.json") for lang in ("en", "zh")}  # lang -> the file


def _ref(concept_id: str, col: str, raw: dict | None) -> SourceRef | None:
    """One pointer of a concept (``None``: no counterpart), its notes in English."""
    if raw is None:
        return None
    key, notes = f"{concept_id}.{col}", PROSE["en"]["notes"]
    return SourceRef(raw["file"], raw["symbol"], detail=notes.get(f"{key}.detail", ""), repo=raw["repo"],
                     commit=raw["commit"], note=notes.get(f"{key}.note", ""), key=key)


def _concept(raw: dict) -> Concept:
    cid = raw["id"]
    text = {lang: PROSE[lang]["concepts"][cid] for lang in PROSE}
    return Concept(cid, raw["section"], {lang: t["title"] for lang, t in text.items()},
                   {lang: t["summary"] for lang, t in text.items()}, raw["ours"],
                   *(_ref(cid, col, raw["refs"][col]) for col in REF_COLUMNS))


CONCEPT_LIST = [_concept(raw) for raw in STRUCTURE]
