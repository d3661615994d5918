"""docs/article.md: what the source article is, its sections with what covers each here; every
citation of it in code and docs points at an anchor that exists, and it names only real things."""

import pathlib
import re

from model_viz import concepts

ROOT = pathlib.Path(__file__).resolve().parents[1]
ARTICLE = (ROOT / "docs" / "article.md").read_text(encoding="utf-8")
ANCHORS = set(re.findall(r'<a id="(s[0-9-]+)"></a>', ARTICLE))


def _anchor(section: str) -> str:
    return "s" + section.strip().replace(".", "-")


def test_it_says_what_the_article_is():
    assert "【轻量化复刻大模型 / KIMI K3】KDA 对 AI Infra 的挑战与各家应对" in ARTICLE
    assert "罗西的思考" in ARTICLE and "2026-11-05" in ARTICLE and "WeChat" in ARTICLE


def test_every_section_of_the_table_of_contents_has_an_anchor():
    toc = {"s0", "s10"} | {f"s{n}" for n in range(1, 10)}
    toc |= {f"s1-{i}" for i in range(1, 4)} | {"s2-1", "s2-2", "s3-1", "s3-2"} | {f"s4-{i}" for i in range(1, 5)}
    toc |= {f"s5-{i}" for i in range(1, 7)} | {f"s6-{i}" for i in range(1, 11)} | {f"s7-{i}" for i in range(1, 5)}
    toc |= {f"s8-{i}" for i in range(1, 7)} | {f"s9-{i}" for i in range(1, 6)}
    assert toc == ANCHORS


def test_every_concept_section_is_an_anchor():
    for c in concepts.CONCEPTS.values():
        missing = [s for s in c.section.split(",") if _anchor(s) not in ANCHORS]
        assert not missing, f"{c.id}: section(s) {missing} are not in docs/article.md"


def test_every_citation_points_at_an_existing_anchor():
    cited = []
    files = [p for d in ("kda_ref", "model_viz", "app_pages", "tests", "docs") for p in (ROOT / d).rglob("*")
             if p.suffix in (".py", ".md")] + [ROOT / "README.md", ROOT / "app.py"]
    for path in files:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"docs/article\.md#(s[0-9-]+)((?:``)?(?:, ``#s[0-9-]+``)*)", text):
            cited.append((path.name, m.group(1)))
            cited += [(path.name, a) for a in re.findall(r"#(s[0-9-]+)", m.group(2))]
        for m in re.finditer(r"\(\.\./article\.md#(s[0-9-]+)\)|\(article\.md#(s[0-9-]+)\)", text):
            cited.append((path.name, m.group(1) or m.group(2)))
    assert len(cited) > 40
    bad = [(f, a) for f, a in cited if a not in ANCHORS]
    assert not bad, bad


def test_it_names_only_real_files_and_concepts():
    for path in re.findall(r"`((?:kda_ref|model_viz|pages|docs|tests)/[^`:#]*?)(?:::[^`]*)?`", ARTICLE):
        assert (ROOT / path.rstrip("/")).exists(), path
    for cid in re.findall(r"`([a-z_]+\.[a-z_.]+)`", ARTICLE):
        if not cid.endswith(".py") and not cid.startswith(("docs", "model_viz", "kda_ref")):
            assert cid in concepts.CONCEPTS, cid


def test_it_is_linked_from_the_readme_and_the_concept_map_page():
    assert "docs/article.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    from model_viz.i18n import t

    assert "docs/article.md" in t("concept_map.intro", "en") and "docs/article.md" in t("concept_map.intro", "zh")


def test_every_relative_link_in_the_docs_resolves():
    bad = []
    for path in [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]:
        for m in re.finditer(r"\]\(([^)#:\s]+\.md)(#[^)]*)?\)", path.read_text(encoding="utf-8")):
            if not (path.parent / m.group(1)).resolve().is_file():
                bad.append((path.relative_to(ROOT).as_posix(), m.group(1)))
            elif m.group(2) and m.group(1).endswith("article.md") and m.group(2)[1:] not in ANCHORS:
                bad.append((path.relative_to(ROOT).as_posix(), m.group(1) + m.group(2)))
    assert not bad, bad
