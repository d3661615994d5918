"""The concept map's data, read from ``model_viz/data/``: every idea of the article, where it lives here and
upstream.

``concepts.json`` holds the language-free part (ids, article sections, our dotted path, the SGLang / vLLM /
fla / Marconi pointers with repository and commit); ``concepts.en.json`` / ``concepts.zh.json`` the prose,
keyed by id. The records are :class:`~model_viz.concept_types.Concept` /
:class:`~model_viz.concept_types.SourceRef`.

Design notes: ``docs/visualizer.md#the-concept-maps-data``.
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
