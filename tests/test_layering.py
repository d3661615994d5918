"""The package import graph follows the layering of docs/architecture.md.

Every import of every module of ``kda_ref`` (relative or absolute, also inside functions) is resolved
to the subpackage it reaches; each subpackage may only depend on the ones listed here. A new edge
against the layering (the simulator reaching into the engine, a prefix cache split across packages,
the engine importing the visualizer) fails this test.
"""

from __future__ import annotations

import ast
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "kda_ref"

# subpackage (or top-level module) -> what it may import from kda_ref. Lower layers first.
ALLOWED = {
    "utils": set(),
    "trace": {"utils"},
    "tokenizer": {"utils"},
    "ops": {"utils"},
    "model": {"ops", "tokenizer", "utils"},
    "memory": {"model", "utils"},
    "kv_events": {"utils"},
    "cache": {"kv_events", "memory", "model", "trace", "utils"},
    "workloads": {"utils"},
    "speculative": {"model", "ops", "utils"},
    "sim": {"cache", "memory", "model", "trace", "utils", "workloads"},
    "engine": {"cache", "context_parallel", "memory", "model", "ops", "speculative", "tokenizer", "trace", "utils"},
    "state_trace": {"model", "ops"},
    "context_parallel": {"model", "ops", "tokenizer", "train", "utils"},
    "disagg": {"engine", "memory", "model", "trace", "utils"},
    "server": {"cache", "engine", "kv_events", "model", "speculative", "tokenizer", "trace", "train", "utils"},
    "train": {"state_trace", "model", "ops", "tokenizer", "utils"},
    "bench": {"cache", "context_parallel", "disagg", "engine", "memory", "model", "ops", "server", "sim", "speculative", "trace", "train",
              "utils", "workloads"},
    "cli": {"bench", "context_parallel", "engine", "kv_events", "model", "server", "tokenizer", "trace", "train", "utils"},
    "__init__": {"engine", "model", "utils"},
}


def _module_parts(path: pathlib.Path) -> tuple[list[str], bool]:
    parts = ["kda_ref", *path.relative_to(PKG).with_suffix("").parts]
    if parts[-1] == "__init__":
        return parts[:-1], True
    return parts, False


def _lazy_imports(node: ast.Call) -> list[ast.ImportFrom]:
    """A package face's ``lazy_exports(__name__, {".sub": [...]})`` as the relative imports it defers."""
    return [ast.ImportFrom(module=k.value.lstrip(".") or None, names=[ast.alias(n.value) for n in v.elts],
                           level=len(k.value) - len(k.value.lstrip(".")))
            for k, v in zip(node.args[1].keys, node.args[1].values)]


def imported_modules(path: pathlib.Path) -> list[str]:
    """Absolute dotted names of everything ``path`` imports (relative imports resolved; a name handed on
    through ``kda_ref.utils.lazy.lazy_exports`` counts as imported from its module)."""
    mod, is_pkg = _module_parts(path)
    out = []
    nodes = list(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
    nodes += [imp for n in nodes if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "lazy_exports"
              for imp in _lazy_imports(n)]
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                out.append(node.module)
                continue
            base = (mod if is_pkg else mod[:-1])[: len(mod if is_pkg else mod[:-1]) - (node.level - 1)]
            if node.module:
                out.append(".".join(base + [node.module]))
            else:
                out += [".".join(base + [a.name]) for a in node.names]
    return out


def package_edges() -> dict[str, set[str]]:
    """subpackage -> the subpackages (and ``model_viz``) it imports; parsed once per package folder."""
    return {src: set(dsts) for src, dsts in _edges_of(PKG).items()}


@functools.lru_cache(maxsize=4)
def _edges_of(pkg: pathlib.Path) -> dict[str, frozenset[str]]:
    edges: dict[str, set[str]] = {}
    for path in pkg.rglob("*.py"):
        rel = path.relative_to(pkg).parts
        src = rel[0].removesuffix(".py")
        for name in imported_modules(path):
            top, *rest = name.split(".")
            if top == "model_viz":
                edges.setdefault(src, set()).add("model_viz")
            elif top == "kda_ref" and rest and rest[0] != src:
                edges.setdefault(src, set()).add(rest[0])
    return {src: frozenset(dsts) for src, dsts in edges.items()}


def test_every_package_is_in_the_layering_table():
    names = {p.name.removesuffix(".py") for p in PKG.iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"}
    assert names == set(ALLOWED), f"new or removed packages: {names ^ set(ALLOWED)}"


@pytest.mark.parametrize("src", sorted(ALLOWED))
def test_no_import_against_the_layering(src):
    got = package_edges().get(src, set())
    assert "model_viz" not in got, f"kda_ref.{src} imports the visualizer"
    bad = got - ALLOWED[src]
    assert not bad, f"kda_ref.{src} imports {sorted(bad)}, against the layering"


def test_both_prefix_caches_live_in_the_cache_package():
    from kda_ref.cache import BlockPrefixCache, NoPrefixCache, PrefixCache, RadixPrefixCache

    for cls in (BlockPrefixCache, NoPrefixCache, RadixPrefixCache):
        assert issubclass(cls, PrefixCache) and cls.__module__.startswith("kda_ref.cache.")
    assert not any("prefix" in p.name for p in (PKG / "engine").glob("*.py")), "request-side cache code in engine/"


def test_the_resolver_sees_relative_and_nested_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "kda_ref"
    (pkg / "sim").mkdir(parents=True)
    bad = pkg / "sim" / "x.py"
    bad.write_text("from ..engine.llm import LLM\nfrom . import y\n\ndef f():\n    import model_viz.concepts\n")
    monkeypatch.setattr(__import__(__name__), "PKG", pkg)
    assert imported_modules(bad) == ["kda_ref.engine.llm", "kda_ref.sim.y", "model_viz.concepts"]
    assert package_edges() == {"sim": {"engine", "model_viz"}}


# ---- model_viz: what each part may use of the engine (model_viz/__init__.py) -------------------------------
VIZ = ROOT / "model_viz"
VIZ_ALLOWED = {
    "scenarios": {"kda_ref", "kda_ref.model", "kda_ref.trace", "kda_ref.cache", "kda_ref.memory", "kda_ref.ops",
                  "kda_ref.sim", "kda_ref.workloads", "kda_ref.state_trace", "kda_ref.train", "kda_ref.tokenizer",
                  "kda_ref.utils", "kda_ref.speculative", "kda_ref.context_parallel",
                  "kda_ref.disagg", "kda_ref.engine.config", "kda_ref.bench.checkpoints", "kda_ref.kv_events"},
    "figures": {"kda_ref.trace", "kda_ref.state_trace", "kda_ref.model", "kda_ref.cache.cost", "kda_ref.tokenizer",
                "kda_ref.utils"},
    "ui": set(),
}


def _viz_imports(path: pathlib.Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            out.append(node.module)
    return [m for m in out if m.split(".")[0] == "kda_ref"]


@pytest.mark.parametrize("part", sorted(VIZ_ALLOWED))
def test_model_viz_parts_use_only_what_they_are_allowed(part):
    for path in sorted((VIZ / part).glob("*.py")):
        for mod in _viz_imports(path):
            ok = any(mod == a or (a != "kda_ref" and mod.startswith(a + ".")) for a in VIZ_ALLOWED[part])
            assert ok, f"model_viz/{part}/{path.name} imports {mod}, outside what model_viz/__init__.py allows"


def test_pages_hold_no_engine_code():
    """A page wires widgets to model_viz; it never imports the engine itself."""
    for path in sorted((ROOT / "app_pages").glob("*.py")):
        assert not _viz_imports(path), f"app_pages/{path.name} imports the engine directly"


def test_the_architecture_doc_draws_exactly_the_import_graph():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("```mermaid", 1)[1].split("```", 1)[0]
    drawn = {tuple(part.strip() for part in line.split("-->")) for line in block.splitlines() if "-->" in line}
    actual = {(src.replace("__init__", "kda_ref"), dst) for src, dsts in package_edges().items() for dst in dsts}
    assert drawn == actual, f"missing from the drawing: {actual - drawn}; drawn but not in the code: {drawn - actual}"


# ---- private members stay inside their package ---------------------------------------------------------
def _package_of(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).parts
    return "kda_ref." + rel[1].removesuffix(".py") if rel[0] == "kda_ref" else rel[0]


def private_reach_ins(sources: list[tuple[str, str, str]]) -> list[str]:
    """``name:line base._member`` for every access to a private member (``_member``, not a dunder) that
    only other packages define -- a method, a class, or an attribute some package assigns to ``self`` --
    made on anything but ``self`` / ``cls``. ``sources``: ``(package, name, text)`` of every module. A
    package's private members are its own; another package calls a public method (the disaggregated
    engine installs a handoff with ``LLM.admit_prefilled``, not by editing the scheduler's queues)."""
    defined: dict[str, set[str]] = {}
    accesses = []
    for pkg, name, text in sources:
        for n in ast.walk(ast.parse(text)):
            member = None
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                member = n.name
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                member = n.target.id
            elif isinstance(n, ast.Attribute):
                base = ast.unparse(n.value)
                if base == "self" and isinstance(n.ctx, ast.Store):
                    member = n.attr
                elif base not in ("self", "cls"):
                    accesses.append((pkg, name, n.lineno, base[:40], n.attr))
            if member and member.startswith("_") and not member.startswith("__"):
                defined.setdefault(member, set()).add(pkg)
    return [f"{name}:{line} {base}.{attr}" for pkg, name, line, base, attr in accesses
            if attr.startswith("_") and not attr.startswith("__") and pkg not in defined.get(attr, {pkg})]


def _sources() -> list[tuple[str, str, str]]:
    files = [*PKG.rglob("*.py"), *VIZ.rglob("*.py"), ROOT / "app.py", *(ROOT / "app_pages").glob("*.py")]
    return [(_package_of(f), str(f.relative_to(ROOT)), f.read_text(encoding="utf-8")) for f in files]


def test_no_package_reaches_into_another_packages_private_members():
    assert not private_reach_ins(_sources())


def test_the_private_reach_in_check_catches_one():
    """A module of another package reading the engine's private request table, as disaggregation once did."""
    rogue = ("kda_ref.disagg", "rogue.py", "def go(llm, rid):\n    return llm._requests[rid]\n")
    assert private_reach_ins([*_sources(), rogue]) == ["rogue.py:2 llm._requests"]


# ---- nothing outside the tests patches the engine ---------------------------------------------------------
# The app serves every browser session from one process: a module global swapped for one page's run (as
# ``mock.patch.object(forward, "exclusive_scan", ...)`` once did on the context-parallel page) is seen by
# every other session's prefill meanwhile, and two patches that exit out of order leave the wrong one
# installed. What a page wants different is an argument of the call (``context_parallel_prefill(scan=)``,
# ``HybridModel.forward(on_dispatch=)``).
#
# Known monkey-patches of live objects, named ``(file, target)`` so that any new one elsewhere fails. They
# predate this check; each should become an argument of the call it bends, and then leave this list.
PATCH_ALLOWANCE = {
    # the bench's optional transformers anchor (``kda_ref.bench.engine.hf_torch_kda``, a CLI benchmark the app
    # never imports): transformers' Kimi-Linear KDA functions dispatch to fla's Triton kernels (GPU only)
    # whenever fla is installed, chosen once at import with no flag to choose the PyTorch reference, so the
    # two module globals are swapped for their ``__wrapped__`` only around transformers' ``generate`` and
    # restored in a ``finally``
    ("kda_ref/bench/engine.py", "setattr(mk, ...)"),
}


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def patch_sites(name: str, text: str) -> set[tuple[str, str]]:
    """``(name, target)`` for every patch in one module: an import of ``unittest.mock`` (or ``mock``), a use
    of ``mock.patch``, ``setattr`` / ``delattr`` on an imported name, an assignment to (or ``del`` of) an
    attribute of an imported module or class, and a lambda or one of the module's functions assigned to
    (or ``del``-eted from) an attribute of another object than ``self`` / ``cls``."""
    tree = ast.parse(text)
    imported, funcs, found = set(), set(), set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            imported |= {(a.asname or a.name).split(".")[0] for a in n.names}
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
            mods += [f"{n.module}.{a.name}" for a in n.names] if isinstance(n, ast.ImportFrom) else []
            if any(m == "mock" or m.startswith(("unittest.mock", "mock.")) for m in mods):
                found.add((name, "import unittest.mock"))
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            funcs.add(n.name)
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr == "patch" and ast.unparse(n.value).endswith("mock"):
            found.add((name, "mock.patch"))
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("setattr", "delattr")
              and n.args and _root_name(n.args[0]) in imported):
            found.add((name, f"{n.func.id}({ast.unparse(n.args[0])}, ...)"))
        pairs = []  # (target, value or None for del)
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for tgt in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                vals = n.value.elts if isinstance(tgt, ast.Tuple) and isinstance(n.value, ast.Tuple) else None
                tgts = tgt.elts if isinstance(tgt, ast.Tuple) else [tgt]
                pairs += list(zip(tgts, vals or [n.value] * len(tgts)))
        elif isinstance(n, ast.Delete):
            pairs += [(tgt, None) for tgt in n.targets]
        for tgt, val in pairs:
            if not isinstance(tgt, ast.Attribute) or _root_name(tgt) in ("self", "cls", None):
                continue
            a_function = val is None or isinstance(val, ast.Lambda) or (isinstance(val, ast.Name) and val.id in funcs)
            if _root_name(tgt) in imported or a_function:
                found.add((name, ast.unparse(tgt)))
    return found


def test_nothing_outside_the_tests_patches_the_engine():
    found = set().union(*(patch_sites(name, text) for _, name, text in _sources()))
    assert not found - PATCH_ALLOWANCE, f"new patches (pass an argument instead): {sorted(found - PATCH_ALLOWANCE)}"
    assert not PATCH_ALLOWANCE - found, f"gone, remove from PATCH_ALLOWANCE: {sorted(PATCH_ALLOWANCE - found)}"


def test_the_patch_check_catches_each_kind():
    rogue = ("from unittest import mock\nfrom kda_ref.context_parallel import forward\nimport kda_ref.model as km\n"
             "def go(llm, scan):\n    with mock.patch.object(forward, 'exclusive_scan', scan):\n        pass\n"
             "    forward.exclusive_scan = scan\n    km.QUERY_BLOCK += 1\n    setattr(forward, 'x', 1)\n"
             "    llm.step = lambda: None\n    del llm.step\n    llm.value, self.ok = 3, go\n")
    assert patch_sites("rogue.py", rogue) == {
        ("rogue.py", t) for t in ("import unittest.mock", "mock.patch", "forward.exclusive_scan", "km.QUERY_BLOCK",
                                  "setattr(forward, ...)", "llm.step")}
    for text in ("import unittest.mock\n", "from unittest.mock import patch\n", "import mock\n"):
        assert patch_sites("x.py", text) == {("x.py", "import unittest.mock")}
