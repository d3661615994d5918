"""The concept map's record types: a :class:`Concept` and the :class:`SourceRef` pointers it holds.

A located pointer names the upstream repository, the file inside it, the symbol, and the commit
the file was read at, so a reader can open exactly what was checked. A pointer that could not be
confirmed has the file :data:`NOT_LOCATED` and says why in ``note``; it never carries a guessed path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NOT_LOCATED = "not located"
_COMMIT = re.compile(r"[0-9a-f]{8,40}")


@dataclass(frozen=True)
class SourceRef:
    file: str  # path inside the repository, or NOT_LOCATED
    symbol: str  # class / function / method, e.g. "KDAKernelDispatcher.decode"
    detail: str = ""  # what to look at there, in a few words
    repo: str = ""  # owner/name on GitHub whose copy of the file was read
    commit: str = ""  # the commit it was read at (hex)
    note: str = ""  # for NOT_LOCATED: why; otherwise anything a reader should know
    key: str = ""  # "<concept id>.<column>": where its notes sit in every language file (model_viz/data)

    def __post_init__(self):
        if not self.file or not self.symbol:
            raise ValueError("SourceRef: file and symbol must be non-empty")
        if self.file == NOT_LOCATED:
            if not self.note:
                raise ValueError(f"SourceRef: {self.symbol!r} is not located; note must say why")
        elif not (self.repo.count("/") == 1 and _COMMIT.fullmatch(self.commit)):
            raise ValueError(f"SourceRef: {self.file}::{self.symbol} needs repo 'owner/name' and a hex commit, "
                             f"got repo={self.repo!r} commit={self.commit!r}")

    @property
    def located(self) -> bool:
        return self.file != NOT_LOCATED

    def label(self) -> str:
        if not self.located:
            return f"{self.symbol} ({NOT_LOCATED})"
        return f"{self.file}::{self.symbol}"

    def url(self) -> str | None:
        """The file at the commit it was read at, on GitHub (None when not located)."""
        if not self.located:
            return None
        return f"https://github.com/{self.repo}/blob/{self.commit}/{self.file}"


@dataclass(frozen=True)
class Concept:
    id: str
    section: str  # sections of docs/article.md, e.g. "1.3, 2.2"
    title: dict  # lang -> str
    summary: dict  # lang -> str
    ours: str  # importable dotted path: module[.attr[.attr]]
    sglang: SourceRef | None
    vllm: SourceRef | None
    fla: SourceRef | None = None
    marconi: SourceRef | None = None  # Marconi's own code (ruipeterpan/marconi), where it has a counterpart

    def refs(self) -> dict[str, SourceRef]:
        """The upstream pointers this concept has, by column."""
        cols = {"sglang": self.sglang, "vllm": self.vllm, "fla": self.fla, "marconi": self.marconi}
        return {k: v for k, v in cols.items() if v is not None}
