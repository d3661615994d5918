"""The Chinese glossary: one rendering of every technical term, in every page, concept and tutorial.

A reader who meets 块表 on one page and "block table" on the next, or 全收集 where every Chinese paper
writes all-gather, wonders whether they are different things. Each :class:`Term` names the rendering the
project uses and the ones it does not; ``tests/test_i18n.py`` scans every Chinese text (the UI strings,
the concept map, the ``*.zh.md`` tutorials -- code spans excluded) and fails on an avoided rendering. The
choices follow common Chinese technical writing on LLM serving: terms the field keeps in English stay in
English (token, checkpoint, rank, all-gather, prefill / decode as phase names), the others are
translated once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Term:
    en: str
    zh: str  # the rendering used
    avoid: tuple[str, ...]  # renderings not used (regular expressions, in Chinese text outside code spans)


GLOSSARY: tuple[Term, ...] = (
    Term("all-gather", "all-gather", ("全收集", "全局收集", "全聚合")),
    Term("block table", "块表", ("block table", "页表")),
    Term("prefix cache", "前缀缓存", ("prefix cache",)),
    Term("KV cache", "KV 缓存", ("KV cache", "KV缓存")),
    Term("memory pool", "内存池", ("显存池",)),  # the pool is the host's memory here, not a GPU's
    Term("speculative decoding", "投机解码", ("推测解码", "投机采样")),
    Term("checkpoint", "checkpoint", ("检查点",)),
    Term("token", "token", ("词元", "令牌")),
    Term("recurrent state", "递推状态", ("循环状态", "递归状态")),
    Term("conv window", "卷积窗口", ("卷积窗(?!口)", "卷积缓存")),
    Term("state slot", "状态槽位", ("状态槽(?!位)", "状态插槽")),
    Term("draft", "草稿", ("草案",)),
    Term("handoff", "交接", ("移交", "handoff")),
    Term("rollback (a rejected draft)", "回滚", ("回档",)),
    Term("back-off (to the deepest checkpoint)", "回退", ("退避",)),
    Term("latent row", "潜在行", ("隐向量行", "潜向量")),
)

_CODE = re.compile(r"`[^`]*`")  # inline code: identifiers stay as the code spells them


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans."""
    parts = text.split("```")
    return _CODE.sub(" ", " ".join(parts[::2]))


def chinese_texts() -> list[tuple[str, str]]:
    """``(where, prose)`` of every Chinese text the project shows: UI strings, concepts, tutorials."""
    from . import concepts, i18n

    out = [(f"strings:{key}", prose(entry["zh"])) for key, entry in i18n.STRINGS.items()]
    for cid, c in concepts.CONCEPTS.items():
        out += [(f"concept:{cid}.title", prose(c.title["zh"])), (f"concept:{cid}.summary", prose(c.summary["zh"]))]
    for path in sorted((ROOT / "docs" / "tutorials").glob("*.zh.md")):
        out.append((f"docs/tutorials/{path.name}", prose(path.read_text(encoding="utf-8"))))
    return out


def violations() -> list[str]:
    """``where: 'avoided' (use 'zh')`` for every avoided rendering found in a Chinese text."""
    found = []
    for where, text in chinese_texts():
        for term in GLOSSARY:
            found += [f"{where}: {m.group(0)!r} (the glossary says {term.zh!r} for {term.en!r})"
                      for bad in term.avoid for m in re.finditer(bad, text)]
    return found
