"""Names loaded on first use (``kda_ref.utils.lazy``): the package faces and the registries whose names the
engine's configuration offers before torch is imported."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

from kda_ref.utils.lazy import LazyRegistry, lazy_exports

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _lazy_faces() -> dict[pathlib.Path, dict[str, list[str]]]:
    """Every package ``__init__`` of kda_ref that hands its names on through ``lazy_exports``."""
    faces = {}
    for init in (ROOT / "kda_ref").rglob("__init__.py"):
        for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports":
                exports = zip(node.args[1].keys, node.args[1].values)
                faces[init] = {k.value: [n.value for n in v.elts] for k, v in exports}
    return faces


def test_a_registry_imports_an_entry_when_it_is_looked_up(tmp_path, monkeypatch):
    (tmp_path / "lazy_probe_mod.py").write_text("import sys\nsys.modules[__name__].loads = 1\nTHING = object()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_probe_mod", raising=False)
    reg = LazyRegistry({"a": "lazy_probe_mod:THING", "b": 2})
    assert list(reg) == ["a", "b"] and len(reg) == 2 and "a" in reg
    assert "lazy_probe_mod" not in sys.modules  # names, membership and length import nothing
    thing = reg["a"]
    assert thing is sys.modules["lazy_probe_mod"].THING and reg["a"] is thing and reg.get("b") == 2
    reg["c"] = "lazy_probe_mod:THING"
    assert dict(reg.items()) == {"a": thing, "b": 2, "c": thing}
    del reg["b"]
    assert list(reg) == ["a", "c"]
    with pytest.raises(KeyError):
        reg["b"]


def test_a_lazy_face_imports_the_module_of_the_name_asked(tmp_path, monkeypatch):
    pkg = tmp_path / "lazy_probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from kda_ref.utils.lazy import lazy_exports\n"
                                     "__getattr__, __dir__, __all__ = lazy_exports(__name__, {'.heavy': ['Thing']})\n")
    (pkg / "heavy.py").write_text("class Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import lazy_probe_pkg

    assert "lazy_probe_pkg.heavy" not in sys.modules and "Thing" in dir(lazy_probe_pkg)
    assert lazy_probe_pkg.__all__ == ["Thing"]
    from lazy_probe_pkg import Thing

    assert Thing is sys.modules["lazy_probe_pkg.heavy"].Thing and vars(lazy_probe_pkg)["Thing"] is Thing
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        lazy_probe_pkg.Nope
    for name in ("lazy_probe_pkg", "lazy_probe_pkg.heavy"):
        monkeypatch.delitem(sys.modules, name)


@pytest.mark.parametrize("init", sorted(_lazy_faces(), key=str), ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_a_lazy_face_names_what_its_modules_define_and_no_submodule(init):
    """Each name a face hands on is defined by the module it names; none is also a submodule of the package
    (importing that submodule later would put the module where the name was: ``speculative.replay``)."""
    import importlib

    package = ".".join(init.parent.relative_to(ROOT).parts)
    subs = {p.stem for p in init.parent.glob("*.py")} | {p.name for p in init.parent.iterdir() if p.is_dir()}
    for module, names in _lazy_faces()[init].items():
        mod = importlib.import_module(module, package)
        for name in names:
            assert name not in subs, f"{package}: {name} is also a submodule"
            assert hasattr(mod, name), f"{package}{module} defines no {name}"
            assert getattr(importlib.import_module(package), name) is getattr(mod, name)


def test_every_registered_entry_is_what_its_name_says():
    from kda_ref.memory.codecs import CHECKPOINT_CODECS
    from kda_ref.speculative.config import STRATEGIES
    from kda_ref.speculative.drafter import Drafter
    from kda_ref.speculative.drafters import DRAFTERS
    from kda_ref.speculative.strategy import RollbackStrategy

    assert [s.name for s in STRATEGIES.values()] == list(STRATEGIES)
    assert all(isinstance(s, RollbackStrategy) for s in STRATEGIES.values())
    assert [c.name for c in CHECKPOINT_CODECS.values()] == list(CHECKPOINT_CODECS)
    assert all(isinstance(d, type) and issubclass(d, Drafter) for d in DRAFTERS.values())


def test_the_package_faces_and_the_configuration_import_without_torch():
    faces = [".".join(init.parent.relative_to(ROOT).parts) for init in _lazy_faces()]
    code = ("import importlib, sys\n"
            f"for name in {faces + ['kda_ref.engine.config', 'kda_ref.server.flags']!r}:\n"
            "    importlib.import_module(name)\n"
            "print('torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False"
    assert len(faces) >= 9
