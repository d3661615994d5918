"""Modules renamed where a newcomer would guess wrong keep their old names for one release: importing an old
name warns (DeprecationWarning) and gives the new module itself, every name in it, private ones too."""

from __future__ import annotations

import importlib
import sys

import pytest

RENAMED = {
    "kda_ref.inspect": "kda_ref.state_trace",  # shadowed the standard library's inspect: no file, an import hook
    "kda_ref.model.cache": "kda_ref.model.layer_state",  # the layers' KV rows and states, not a prefix cache
    "kda_ref.speculative.draft": "kda_ref.speculative.draft_model",  # the draft-model drafter
    "kda_ref.engine.speculation": "kda_ref.engine.spec_steps",  # the scheduler's speculative steps
    "kda_ref.parallel": "kda_ref.context_parallel",  # context parallelism only
    "kda_ref.parallel.launch": "kda_ref.context_parallel.launch",
    "kda_ref.parallel.torchrun": "kda_ref.context_parallel.torchrun",
    # merged into the module a decode step enters anyway (docs/architecture.md, "A decode step, file by file")
    "kda_ref.engine.progress": "kda_ref.engine.request_memory",
    "kda_ref.engine.detokenizer": "kda_ref.engine.stopping",
    "kda_ref.engine.scheduled": "kda_ref.engine.scheduler",
    "kda_ref.model.residual": "kda_ref.model.decoder",
    "kda_ref.model.fused": "kda_ref.model.parts",
}


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_an_old_module_name_warns_and_is_the_new_module(old, monkeypatch):
    new = importlib.import_module(RENAMED[old])
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=f"^{old} is now {RENAMED[old]}; the old name goes in the next release"):
        got = importlib.import_module(old)
    public = [n for n in vars(new) if not n.startswith("__")]
    assert public and all(getattr(got, n) is getattr(new, n) for n in public)
    if not hasattr(new, "__path__"):  # a module is handed over whole; a package keeps its folder (its docstring)
        assert got is new


def test_an_old_packages_module_is_the_new_module_not_a_second_copy():
    """``kda_ref.parallel.launch`` after ``kda_ref.parallel``: the one launch module, its classes the same objects
    (a copy would make ``ContextParallelFallback`` two classes, and the suite's warning filter miss one)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kda_ref.parallel
        import kda_ref.parallel.launch as old_launch
    from kda_ref.context_parallel import launch

    assert old_launch is launch and kda_ref.parallel.ContextParallelFallback is launch.ContextParallelFallback


def test_the_engine_imports_no_old_name():
    """The package itself uses the new names only (an old one would warn at every import)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    olds = [o.rsplit(".", 1)[1] for o in RENAMED]
    for path in (root / "kda_ref").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "forward_to(__name__" in text or path.parent == root / "kda_ref" / "parallel":  # the shims themselves
            continue
        assert "from ..parallel" not in text and "from .parallel " not in text, path
        for old, stem in zip(RENAMED, olds):
            pkg = old.rsplit(".", 1)[0]
            assert f"import {old}" not in text and f"from {old} " not in text, (path, old)
            if path.parent.name == pkg.rsplit(".", 1)[-1]:
                assert f"from .{stem} import" not in text, (path, old)


def test_an_old_name_that_shadowed_the_standard_library_is_no_file():
    """``kda_ref/inspect.py`` made ``import inspect`` find it for a script run from inside the package; the old
    name is answered by the import hook of ``kda_ref.utils.renamed`` instead (tested above)."""
    import pathlib

    from kda_ref.utils.renamed import NO_FILE

    root = pathlib.Path(__file__).resolve().parents[1]
    for old in NO_FILE:
        path = root.joinpath(*old.split("."))
        assert not path.with_suffix(".py").exists() and not path.is_dir(), old
