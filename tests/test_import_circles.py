"""No two modules import each other, directly or around a loop.

Every import of every module of ``kda_ref``, ``model_viz`` and the pages (top-level, inside functions, under
``TYPE_CHECKING`` and named by a lazy registry's ``"module:attribute"`` entry alike) is resolved to the file it reaches: ``from ..pkg import Name`` reaches the
submodule whose name ``pkg/__init__.py`` hands on (a package's face is not a module of its own), and a
loop in that graph is a circle. A circle means neither module can be read, tested or moved without the
other, and a lazy import that hides one only defers it to the first call.
"""

from __future__ import annotations

import ast
import pathlib

import networkx as nx

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOPS = ("kda_ref", "model_viz", "app_pages")


def module_name(path: pathlib.Path, root: pathlib.Path) -> tuple[str, bool]:
    """``(dotted name, is a package's __init__)`` of ``path`` under ``root``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return (".".join(parts[:-1]), True) if parts[-1] == "__init__" else (".".join(parts), False)


def _registry_ref(node) -> str | None:
    """The module a :class:`~kda_ref.utils.lazy.LazyRegistry` entry names (``"kda_ref.a.b:Name"``, or an
    f-string that starts so): an import deferred to the first lookup is an import all the same."""
    head = node.value if isinstance(node, ast.Constant) else None
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        head = node.values[0].value
    if isinstance(head, str) and head.startswith(TOPS) and ":" in head and " " not in head:
        return head.split(":", 1)[0]
    return None


def _imports(path: pathlib.Path, root: pathlib.Path):
    """``(module, [names])`` per import of ``path``; relative ones resolved (names: ``from m import ...``)."""
    mod, is_pkg = module_name(path, root)
    here = mod.split(".") if is_pkg else mod.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if _registry_ref(node):
            yield _registry_ref(node), []
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - (node.level - 1)] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            yield target, [a.name for a in node.names]


def _lazy_face(path: pathlib.Path, root: pathlib.Path) -> dict[str, str]:
    """``{name: module}`` a package face hands on through ``lazy_exports(__name__, {".sub": [names]})``
    (:mod:`kda_ref.utils.lazy`), relative modules resolved."""
    mod = module_name(path, root)[0].split(".")
    face = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports":
            for key, names in zip(node.args[1].keys, node.args[1].values):
                rel = key.value
                dots = len(rel) - len(rel.lstrip("."))
                target = ".".join(mod[: len(mod) - (dots - 1)] + [rel.lstrip(".")])
                face.update({n.value: target for n in names.elts})
    return face


def _files(root: pathlib.Path) -> dict[str, pathlib.Path]:
    files = {}
    for top in TOPS:
        for path in (root / top).rglob("*.py"):
            files[module_name(path, root)[0]] = path
    return files


def _reach(target: str, name: str, files: dict, faces: dict) -> str | None:
    """The module ``from target import name`` reaches: a submodule, the one a face takes ``name`` from, the
    module itself; None outside the project."""
    if f"{target}.{name}" in files:
        return f"{target}.{name}"
    if target in faces:
        source = faces[target].get(name)
        return _reach(source, name, files, faces) if source else target
    return target if target in files else None


def import_graph(root: pathlib.Path = ROOT) -> nx.DiGraph:
    """module -> the modules it imports, over the project's files (package faces resolved through)."""
    files = _files(root)
    faces = {}  # package -> {name it hands on: the module it imports it from}
    for mod, path in files.items():
        if path.name == "__init__.py":
            faces[mod] = {**{n: t for t, names in _imports(path, root) for n in names}, **_lazy_face(path, root)}
    g = nx.DiGraph()
    for mod, path in files.items():
        if path.name == "__init__.py":
            continue
        g.add_node(mod)
        for target, names in _imports(path, root):
            for dst in ({_reach(target, n, files, faces) for n in names} if names else {_reach(target, "", files, faces)}):
                if dst and dst != mod:
                    g.add_edge(mod, dst)
    return g


def circles(g: nx.DiGraph) -> list[list[str]]:
    """Every set of modules that import each other around a loop, sorted."""
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def test_no_module_imports_one_that_imports_it_back():
    g = import_graph()
    assert g.number_of_edges() > 500  # the resolver reaches the project's imports, not a handful of them
    assert ("kda_ref.speculative.drafters", "kda_ref.speculative.ngram_drafter") in g.edges
    assert circles(g) == []


def test_the_check_finds_a_circle_through_a_package_face_and_a_lazy_import(tmp_path):
    pkg = tmp_path / "kda_ref" / "a"
    pkg.mkdir(parents=True)
    (tmp_path / "model_viz").mkdir()
    (tmp_path / "app_pages").mkdir()
    (tmp_path / "kda_ref" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .x import X\nfrom .y import Y\n")
    (pkg / "x.py").write_text("X = 1\n\ndef f():\n    from ..a import Y\n")  # x -> y through the face
    (pkg / "y.py").write_text("from .x import X\nY = 2\n")
    (pkg / "z.py").write_text("from . import x\n")
    g = import_graph(tmp_path)
    assert ("kda_ref.a.z", "kda_ref.a.x") in g.edges
    assert circles(g) == [["kda_ref.a.x", "kda_ref.a.y"]]
    (pkg / "x.py").write_text("X = 1\n")
    assert circles(import_graph(tmp_path)) == []
    # the same circle through a face that loads its names on first use (kda_ref.utils.lazy)
    (pkg / "__init__.py").write_text("from ..utils.lazy import lazy_exports\n"
                                     "__getattr__, __dir__ = lazy_exports(__name__, {'.x': ['X'], '.y': ['Y']})\n")
    (pkg / "x.py").write_text("X = 1\n\ndef f():\n    from ..a import Y\n")
    assert circles(import_graph(tmp_path)) == [["kda_ref.a.x", "kda_ref.a.y"]]
