"""The scheduler is one class whose state is visible in one place: no mixins, every attribute it holds
assigned in its ``__init__``, and the functions that work on it from other modules (recovery, the
prefill/decode handoff, the progress guarantee) use its public parts only."""

from __future__ import annotations

import ast
import pathlib
import re

from kda_ref.engine import handoff, recovery, request_memory
from kda_ref.engine.scheduler import Scheduler

ENGINE = pathlib.Path(__file__).resolve().parents[1] / "kda_ref" / "engine"


def _stores(tree: ast.AST, name: str) -> set[str]:
    """Attributes of ``name`` assigned (``name.x = ...``, ``name.x += ...``) anywhere in ``tree``."""
    out = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for el in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name) and el.value.id == name:
                    out.add(el.attr)
    return out


def test_the_scheduler_has_no_base_and_declares_what_it_holds():
    assert Scheduler.__bases__ == (object,)
    cls = next(n for n in ast.parse((ENGINE / "scheduler.py").read_text()).body
               if isinstance(n, ast.ClassDef) and n.name == "Scheduler")
    init = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    declared = _stores(init, "self")
    assert {"waiting", "running", "suspects", "memory", "watch", "counters"} <= declared
    later = set().union(*(_stores(f, "self") for f in cls.body if isinstance(f, ast.FunctionDef) and f.name != "__init__"))
    assert later <= declared, f"attributes first set outside __init__: {later - declared}"
    for mod in (recovery, handoff, request_memory):  # what the functions of the scheduler write on it
        text = pathlib.Path(mod.__file__).read_text()
        assert _stores(ast.parse(text), "s") <= declared, mod.__name__
        assert not re.search(r"\bs\._[a-z]", text), f"{mod.__name__} reaches into the scheduler's private parts"
