"""The concept map cannot rot; UI strings exist in both languages; the page's data helpers."""

import re
import string

import pytest

from model_viz import concepts
from model_viz import i18n
from model_viz.figures import state_evolution as sp_fig

# concept ids named in the engine's docstrings ("Article concept ``...``")
from model_viz.scenarios import state_evolution as sp
from model_viz.i18n import in_language

# concept ids named in the engine's docstrings ("Article concept ``...``")
ENGINE_IDS = {
    "kda.recurrence", "kda.chunk_form", "kda.chunk_checkpoints", "kda.gate", "kda.state_evolution",
    "kda.delta_rule", "state.conv", "state.mla_kv", "state.three_kinds", "state.bytes", "chain.hybrid",
    "varlen.metadata", "sglang.kda_dispatcher", "sglang.radix_linear_attention_forward", "sglang.kda_layer",
}


@pytest.mark.parametrize("cid", sorted(concepts.CONCEPTS))
def test_every_ours_pointer_resolves(cid):
    c = concepts.CONCEPTS[cid]
    obj = concepts.resolve(c.ours)
    assert callable(obj), f"{cid}: {c.ours} resolved to a non-callable {obj!r}"


@pytest.mark.parametrize("cid", sorted(concepts.CONCEPTS))
def test_every_concept_is_complete_in_both_languages(cid):
    c = concepts.CONCEPTS[cid]
    assert c.id == cid
    for lang in i18n.LANGS:
        assert c.title[lang].strip() and c.summary[lang].strip()
    assert re.fullmatch(r"[0-9.]+(, [0-9.]+)*", c.section), c.section
    for col, ref in c.refs().items():
        assert " (" not in ref.symbol and "->" not in ref.symbol, "explanations go in detail, not symbol"
        if ref.located:
            # recorded with what was checked: the repository and the commit the file was read at
            assert re.fullmatch(r"[\w.-]+/[\w.-]+", ref.repo), f"{cid}.{col}: repo {ref.repo!r}"
            assert re.fullmatch(r"[0-9a-f]{40}", ref.commit), f"{cid}.{col}: commit {ref.commit!r} is not a full sha"
            assert "/" in ref.file and not ref.file.startswith("/"), ref.file
            assert ref.url() == f"https://github.com/{ref.repo}/blob/{ref.commit}/{ref.file}"
        else:
            assert len(ref.note) > 10, f"{cid}.{col}: 'not located' must say why"
        if col == "sglang" and ref.located:
            assert ref.file.startswith("python/sglang/"), f"{cid}: an SGLang pointer to {ref.file}"
        if col == "vllm" and ref.located:
            assert ref.file.startswith("vllm/"), f"{cid}: a vLLM pointer to {ref.file}"
        if col == "fla" and ref.located:  # the fla column shows fla's code, not an engine's
            assert ref.repo == "fla-org/flash-linear-attention" and ref.file.startswith("fla/"), \
                f"{cid}: an fla pointer to {ref.repo}:{ref.file}"


def test_a_pointer_without_its_commit_or_reason_is_refused():
    with pytest.raises(ValueError, match="hex commit"):
        concepts.SourceRef("python/sglang/srt/x.py", "X", repo="sgl-project/sglang")
    with pytest.raises(ValueError, match="hex commit"):
        concepts.SourceRef("python/sglang/srt/x.py", "X", commit="0" * 40)
    with pytest.raises(ValueError, match="must say why"):
        concepts.SourceRef(concepts.NOT_LOCATED, "X")
    ok = concepts.SourceRef("vllm/v1/x.py", "X", repo="vllm-project/vllm", commit="ab" * 20)
    assert ok.located and ok.url().endswith("/blob/" + "ab" * 20 + "/vllm/v1/x.py")


def test_the_pointers_the_audit_corrected():
    """Pointers once marked "not located" or filed in the wrong column (issue 12's list)."""
    layer = concepts.get("sglang.kda_layer")
    assert layer.sglang.located and layer.sglang.file.endswith("models/kimi_k3.py")
    assert layer.sglang.symbol == "KimiK3DeltaAttention"
    bytes_ = concepts.get("state.bytes")
    assert bytes_.sglang is None or bytes_.sglang.file.startswith("python/sglang/")
    track = concepts.get("sglang.track_interval").sglang
    assert track.located and track.file.endswith("server_args.py") and "mamba_track_interval" in track.symbol
    assert concepts.get("vllm.retention").vllm.symbol == "MambaManager.reachable_block_mask"
    tuner = concepts.get("marconi.alpha_tuning")
    assert tuner.marconi is not None and "tune" in tuner.marconi.symbol.lower()
    assert tuner.vllm is None or "ConfigTuner" not in tuner.vllm.symbol
    assert "ConfigTuner" not in repr([c.vllm for c in concepts.CONCEPTS.values()])
    # RadixLinearAttention.forward only hands the call to the backend
    assert "backend" in concepts.get("sglang.radix_linear_attention_forward").summary["en"].lower()


def test_the_engine_ids_are_all_mapped():
    assert ENGINE_IDS <= set(concepts.CONCEPTS)


def test_engine_docstring_ids_are_in_the_map():
    """Every concept id quoted in an engine docstring has an entry (catches a new id nobody mapped)."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1] / "kda_ref"
    quoted = set()
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"concepts?[^\n]{0,40}?``([a-z_]+\.[a-z_.]+)``", text):
            quoted.add(m.group(1))
        for m in re.finditer(r"``([a-z_]+\.[a-z_]+)``\)", text):  # "(... ``kda.recurrence``)"
            quoted.add(m.group(1))
    quoted = {q for q in quoted if q.split(".")[0] in {"kda", "state", "chain", "varlen", "sglang", "vllm", "spec"}}
    # kda.chunkwise is the Triton module's spelling of kda.chunk_form
    missing = quoted - set(concepts.CONCEPTS) - {"kda.chunkwise"}
    assert not missing, f"concept ids used in kda_ref docstrings but absent from the map: {missing}"


def test_resolve_fails_loudly():
    with pytest.raises(ModuleNotFoundError):
        concepts.resolve("kda_ref.no_such_module.fn")
    with pytest.raises(AttributeError):
        concepts.resolve("kda_ref.ops.kda_recurrent.no_such_function")
    with pytest.raises(KeyError, match="unknown concept id"):
        concepts.get("kda.nope")


def test_concept_markdown_has_all_pointers():
    md = in_language("en", concepts.concept_markdown, "sglang.kda_dispatcher")
    assert "kda_ref.ops.dispatcher.KDAKernelDispatcher" in md
    ref = concepts.get("sglang.kda_dispatcher").sglang
    assert ref.file in md and ref.url() in md and ref.commit[:8] in md
    assert "vllm/model_executor/layers/kda.py" in md
    zh = in_language("zh", concepts.concept_markdown, "marconi.eviction")
    assert "本项目" in zh and "未定位" in zh and "Marconi" in zh and concepts.NOT_LOCATED not in zh


def test_both_language_files_hold_the_same_keys_and_placeholders():
    """The concept map's prose is one data file per language, keyed by id: the same concepts (title and
    summary) and the same pointer notes in each, the same ``{placeholders}`` in every pair, and code in a
    note (dotted names, PR numbers) carried over unchanged."""
    from model_viz.concept_data import PROSE, STRUCTURE

    en, zh = PROSE["en"], PROSE["zh"]
    assert en.keys() == zh.keys() == {"concepts", "notes"}
    assert en["concepts"].keys() == zh["concepts"].keys() == {c["id"] for c in STRUCTURE}
    assert en["notes"].keys() == zh["notes"].keys()
    pairs = [(en["notes"][k], zh["notes"][k]) for k in en["notes"]]
    pairs += [(en["concepts"][c][f], zh["concepts"][c][f]) for c in en["concepts"] for f in ("title", "summary")]
    for a, b in pairs:
        assert _fields(a) == _fields(b), (a, b)
    for a, b in pairs[:len(en["notes"])]:
        for code in re.findall(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_.]*|#\d+", a):
            assert code in b, (code, b)  # dotted names and PR numbers carried over unchanged


def test_every_pointer_note_is_in_the_files_and_the_chinese_panel_shows_it():
    """Each pointer's notes are read from the language files by its key (none stray there), and the
    Chinese panel shows the Chinese, never the English prose."""
    from model_viz.concept_data import PROSE

    keys = {f"{r.key}.{which}" for c in concepts.CONCEPTS.values() for r in c.refs().values()
            for which in ("detail", "note") if getattr(r, which)}
    assert keys == set(PROSE["en"]["notes"])
    ref = concepts.get("sglang.kda_dispatcher").sglang
    md = in_language("zh", concepts.concept_markdown, "sglang.kda_dispatcher")
    assert PROSE["zh"]["notes"][f"{ref.key}.detail"] in md and ref.detail not in md


def _fields(s):
    return {f for _, f, _, _ in string.Formatter().parse(s) if f}


@pytest.mark.parametrize("key", sorted(i18n.STRINGS))
def test_every_string_exists_in_both_languages(key):
    entry = i18n.STRINGS[key]
    assert set(entry) == set(i18n.LANGS)
    assert all(entry[lang].strip() for lang in i18n.LANGS)
    assert _fields(entry["en"]) == _fields(entry["zh"]), f"{key}: placeholders differ"


def test_t_raises_on_unknown_key_or_language():
    assert i18n.t("home.nav", "zh") == "首页"
    assert "64 × 64" in i18n.t("state_evolution.intro", "en", K=64, V=64)
    with pytest.raises(KeyError, match="no string"):
        i18n.t("no.such.key", "en")
    with pytest.raises(KeyError, match="unknown language"):
        i18n.t("home.nav", "fr")


def test_prompt_checks():
    assert sp.encode_prompt("ab") == [97, 98]
    for bad in ("", "   ", None):
        with pytest.raises(sp.PromptError) as e:
            sp.encode_prompt(bad)
        assert e.value.key == "state_evolution.err.empty"
    with pytest.raises(sp.PromptError) as e:
        sp.encode_prompt("é" * 129)  # 258 bytes
    assert "258" in in_language("en", e.value.message) and "258" in in_language("zh", e.value.message)
    assert len(sp.encode_prompt("é" * 128)) == 256
    assert len(sp.encode_prompt(sp.DEFAULT_PROMPT)) <= sp.MAX_PROMPT_BYTES


def test_clamp_step_and_token_strip():
    assert sp.clamp_step(None, 5) == 0 and sp.clamp_step(9, 5) == 4 and sp.clamp_step(-2, 5) == 0
    html = sp_fig.token_strip_html([60, 98, 62], 1)  # "<b>"
    assert "&lt;" in html and "<b>" not in html.replace("<span", "").replace("</span>", "")
    assert html.count("<span") == 3 and html.count("font-weight:700") == 1


def test_state_size_facts_match_the_config():
    cfg = sp.build_model().config
    f = sp.state_size_facts(cfg, 10)
    assert f["K"] == cfg.linear_head_dim == 64
    assert f["head_kib"] == 64 * 64 * 4 / 1024
    assert f["layer_kib"] == cfg.linear_num_heads * f["head_kib"]


# every page with a tutorial, by slug: model_viz.figures.<slug> holds the PAGE_CONCEPTS the page shows, and
# docs/tutorials/<slug>.md (+ .zh.md) is its tutorial
STEPPED_PAGES = ("hybrid_chain", "three_states", "state_evolution", "kda_segments", "prefix_vs_kv", "checkpoint_tree",
                 "restore_paths", "pool_map", "state_blocks", "checkpoint_density", "compressed_checkpoints",
                 "swa_vs_kda", "spec_decode", "context_parallel", "pd_disaggregation", "lab", "live")


@pytest.mark.parametrize("name", STEPPED_PAGES)
def test_tutorials_use_the_page_concepts_and_are_linked(name):
    import importlib
    import pathlib

    module = importlib.import_module(f"model_viz.figures.{name}")
    root = pathlib.Path(__file__).resolve().parents[1]
    docs = root / "docs"
    for suffix in (".md", ".zh.md"):
        text = (docs / "tutorials" / f"{name}{suffix}").read_text(encoding="utf-8")
        missing = [cid for cid in module.PAGE_CONCEPTS if f"`{cid}`" not in text]
        assert not missing, f"{name}{suffix} does not name {missing}"
    start = (docs / "getting_started.md").read_text(encoding="utf-8")
    assert f"tutorials/{name}.md" in start and f"tutorials/{name}.zh.md" in start
