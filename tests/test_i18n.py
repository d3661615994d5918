"""Every UI string is used, every key the code uses exists, and no key is assembled at run time.

Keys are ``<namespace>.<name>`` (namespaces: ``common`` and the page slugs, :data:`model_viz.i18n.NAMESPACES`).
The code that shows a string names its key as one whole literal (a table of literals where it picks
one of several), so reading the source is enough to know which keys are used.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

from model_viz import i18n
from model_viz.ui.page_index import PAGES

ROOT = pathlib.Path(__file__).resolve().parents[1]
KEY = re.compile(r"^(%s)\.[a-z0-9_.]+$" % "|".join(i18n.NAMESPACES))
PREFIX = re.compile(r"^(%s)\." % "|".join(i18n.NAMESPACES))


def source_files(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    files = [*root.glob("app_pages/*.py"), *root.glob("model_viz/**/*.py")]
    if (root / "app.py").exists():
        files.append(root / "app.py")
    return [f for f in files if "strings" not in f.relative_to(root).parts]


def scan(files) -> tuple[set[str], list[str]]:
    """(every string literal that looks like a key, every f-string that starts like one)."""
    literals, built = set(), []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        fragments = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and KEY.match(node.value) \
                    and id(node) not in fragments:
                literals.add(node.value)
            elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) \
                    and isinstance(node.values[0].value, str) and PREFIX.match(node.values[0].value):
                built.append(f"{path.name}:{node.lineno}: f{node.values[0].value!r}...")
    return literals, built


def test_every_key_is_used_somewhere():
    used, _ = scan(source_files())
    unused = sorted(set(i18n.STRINGS) - used)
    assert not unused, f"{len(unused)} strings nothing uses: {unused[:20]}"


def test_every_key_the_code_names_exists():
    used, _ = scan(source_files())
    missing = sorted(used - set(i18n.STRINGS))
    assert not missing, f"keys the code uses that have no string: {missing}"


def test_no_key_is_built_with_an_f_string():
    _, built = scan(source_files())
    assert not built, f"keys assembled at run time (write them out in a table): {built}"


@pytest.mark.parametrize("lang", i18n.LANGS)
def test_every_string_has_every_language(lang):
    empty = [k for k, v in i18n.STRINGS.items() if not v.get(lang, "").strip()]
    assert not empty, f"{lang}: missing or empty: {empty[:20]}"


def test_each_namespace_has_its_strings_and_page():
    """Every namespace holds strings in the language files (one per language, keyed by id), and every key
    belongs to a namespace: ``common`` or a page's slug."""
    used = {key.split(".", 1)[0] for key in i18n.STRINGS}
    assert used == set(i18n.NAMESPACES)
    files = {p.name for p in (ROOT / "model_viz" / "data").glob("strings.*.json")}
    assert files == {f"strings.{lang}.json" for lang in i18n.LANGS}
    assert {p.slug for p in PAGES} == set(i18n.NAMESPACES) - {"common"}
    for p in PAGES:
        assert (ROOT / p.file).is_file() and p.title_key.startswith(p.slug + ".")
        assert (ROOT / "model_viz" / "figures" / f"{p.slug}.py").is_file() or p.slug in ("home",)


def test_the_scanner_finds_unused_missing_and_built_keys(tmp_path):
    (tmp_path / "app_pages").mkdir()
    (tmp_path / "app_pages" / "x.py").write_text(
        'from model_viz.i18n import t\n'
        't("common.prev", "en")\n'
        't("common.no_such_key", "en")\n'
        'kind = "a"\n'
        't(f"common.kind.{kind}", "en")\n'
        'label = f"{t(\'common.next\', \'en\')} ▶"\n')
    used, built = scan(source_files(tmp_path))
    assert used == {"common.prev", "common.no_such_key", "common.next"}
    assert used - set(i18n.STRINGS) == {"common.no_such_key"} and "common.play" in set(i18n.STRINGS) - used
    assert built == ["x.py:5: f'common.kind.'..."]


def test_every_chinese_text_uses_the_glossary():
    """One rendering per technical term in the UI strings, the concept map and the tutorials
    (model_viz/glossary.py): 块表 everywhere, never "block table" in one place and 块表 in another."""
    from model_viz import glossary

    assert not glossary.violations()


def test_the_glossary_check_catches_a_second_rendering(monkeypatch):
    from model_viz import glossary

    texts = glossary.chinese_texts()
    monkeypatch.setattr(glossary, "chinese_texts",
                        lambda: [*texts, ("planted", glossary.prose("各 rank 先做全收集，再查 block table；`block table` 是代码"))])
    assert glossary.violations() == [
        "planted: '全收集' (the glossary says 'all-gather' for 'all-gather')",
        "planted: 'block table' (the glossary says '块表' for 'block table')"]


# the language is passed once, where a page starts: only these name it as an argument
EXPLICIT_LANGUAGE = {("i18n.py", "t"), ("i18n.py", "plural"), ("i18n.py", "use_language"), ("i18n.py", "language"),
                     ("i18n.py", "in_language"), ("i18n.py", "_checked"),
                     # a page's cached figure: st.cache_data keys on the arguments, so the language must be one
                     ("hybrid_chain.py", "_timeline")}


def functions_taking_lang(files) -> list[tuple[str, str]]:
    """(file, function) for every function of ``files`` with a parameter named ``lang``."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                if any(p.arg == "lang" for p in a.posonlyargs + a.args + a.kwonlyargs):
                    found.append((path.name, getattr(node, "name", "<lambda>")))
    return found


def test_no_figure_or_page_function_takes_the_language():
    """The language is a context the page sets once (``app.py``: ``use_language``); a figure, table or page
    helper that takes ``lang`` again would start the threading through every call anew."""
    assert sorted(set(functions_taking_lang(source_files())) - EXPLICIT_LANGUAGE) == []


def test_the_scan_finds_a_function_that_takes_the_language(tmp_path):
    (tmp_path / "fig.py").write_text("def figure(x, lang='en'):\n    return x\n")
    assert functions_taking_lang([tmp_path / "fig.py"]) == [("fig.py", "figure")]


def test_the_language_is_a_context_restored_after_its_block():
    assert i18n.current_language() == "en"
    with i18n.language("zh"):
        assert i18n.t("common.app_name") == i18n.t("common.app_name", "zh") != i18n.t("common.app_name", "en")
        assert i18n.in_language("en", i18n.t, "common.app_name") == i18n.t("common.app_name", "en")
        assert i18n.current_language() == "zh"
    assert i18n.current_language() == "en"
    with pytest.raises(KeyError, match="unknown language 'fr'"):
        i18n.use_language("fr")
