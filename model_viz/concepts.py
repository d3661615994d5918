"""The concept map: every idea of the source article, with where it lives in code.

One source of truth, as data (``model_viz/data/concepts*.json``, read by :mod:`model_viz.concept_data`).
Each :class:`Concept` has a stable id, its ``docs/article.md`` section, *our* implementation as a dotted
path, and its counterparts in SGLang and vLLM (and fla or Marconi); a pointer (:class:`SourceRef`) that
could not be confirmed is :data:`NOT_LOCATED`, ``None`` means no counterpart.

Design notes: ``docs/visualizer.md#the-concept-maps-data``.
"""

from __future__ import annotations

import importlib
import types

from .concept_data import CONCEPT_LIST, PROSE
from .concept_types import NOT_LOCATED, Concept, SourceRef
from .i18n import current_language, t

__all__ = ["NOT_LOCATED", "Concept", "SourceRef", "CONCEPTS", "get", "resolve", "concept_markdown"]

CONCEPTS: dict[str, Concept] = {c.id: c for c in CONCEPT_LIST}


def get(concept_id: str) -> Concept:
    """The concept with this id; ``KeyError`` naming the id if there is none."""
    try:
        return CONCEPTS[concept_id]
    except KeyError:
        raise KeyError(f"concepts: unknown concept id {concept_id!r}") from None


def resolve(dotted: str):
    """Import ``package.module[.attr...]`` and return the object it names.

    Walks the path left to right: an attribute if the object has it, else a submodule import.
    Raises ``ModuleNotFoundError`` / ``AttributeError`` when a part does not exist.
    """
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    name = parts[0]
    for part in parts[1:]:
        name = f"{name}.{part}"
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif isinstance(obj, types.ModuleType) and hasattr(obj, "__path__"):  # a package: try a submodule
            obj = importlib.import_module(name)
        else:
            raise AttributeError(f"concepts: {dotted!r}: {type(obj).__name__} has no attribute {part!r}")
    return obj


def note_text(ref: SourceRef, which: str) -> str:
    """A pointer's ``which`` note (``"detail"`` or ``"note"``) in the current language, from that language's file
    (``model_viz/data/concepts.<lang>.json``, key ``"<ref.key>.<which>"``)."""
    lang = current_language()
    return PROSE[lang]["notes"][f"{ref.key}.{which}"]


def _ref_md(ref: SourceRef | None) -> str:
    if ref is None:
        return t("common.concepts.none")
    if not ref.located:
        text = f"{ref.symbol} — *{t('common.concepts.not_located')}*"
    else:
        text = f"[`{ref.file}`]({ref.url()}) · `{ref.symbol}`"
    if ref.detail:
        text += f" — {note_text(ref, 'detail')}"
    if ref.located:
        text += " (" + t("common.concepts.read_at", commit=ref.commit[:8], repo=ref.repo) + ")"
    return f"{text} ({note_text(ref, 'note')})" if ref.note else text


# the pointer rows of a concept's panel: column -> i18n key of its label (written whole for tests/test_i18n.py)
_REF_LABEL = {"sglang": "common.concepts.sglang", "vllm": "common.concepts.vllm", "fla": "common.concepts.fla",
              "marconi": "common.concepts.marconi"}


def concept_markdown(concept_id: str) -> str:
    """A concept as markdown for the "concepts on this page" panel (explanation + pointers).

    SGLang and vLLM always get a row (saying "no counterpart" when there is none); the
    flash-linear-attention and Marconi rows appear only where the concept has a pointer there."""
    lang = current_language()
    c = get(concept_id)
    lines = [
        c.summary[lang],
        "",
        f"- **{t('common.concepts.section')}:** {c.section} (`docs/article.md`) · `{c.id}`",
        f"- **{t('common.concepts.ours')}:** `{c.ours}`",
    ]
    for col, key in _REF_LABEL.items():
        ref = getattr(c, col)
        if ref is not None or col in ("sglang", "vllm"):
            lines.append(f"- **{t(key)}:** {_ref_md(ref)}")
    return "\n".join(lines)
