"""Loading real checkpoint folders: both dense-MLP layouts (Moonshot's ``mlp.*`` and the one
transformers' ``save_pretrained`` writes), sharded folders, and the tokenizer a folder ships."""

import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file

from kda_ref import LLM, SamplingParams
from kda_ref.engine.request import RequestError
from kda_ref.model import HybridModel, ModelConfig, load_pretrained, save_pretrained
from kda_ref.model.weights import CheckpointError
from kda_ref.tokenizer import ByteTokenizer, load_tokenizer

from oracles import hf_kimi_linear

PROMPT = [256, 5, 17, 99, 3, 64, 200, 31, 8, 120, 77, 42]  # <bos> + 11 byte ids


def _model(seed=11) -> HybridModel:
    model = HybridModel(ModelConfig.tiny(), seed=seed).eval()
    with torch.no_grad():  # larger weights: decisive logits, so greedy tokens are stable under 1e-5 noise
        for name, p in model.named_parameters():
            if name.endswith(("proj.weight", "w1.weight", "w2.weight", "w3.weight", "embed_tokens.weight")):
                p.mul_(4.0)
    return model


def _greedy(model, n=12) -> list[int]:
    out = LLM(model, prefix_cache="none").generate([PROMPT], SamplingParams(max_tokens=n, ignore_eos=True))[0]
    return list(out.token_ids)


def _same_params(a: HybridModel, b: HybridModel) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=0, atol=0, msg=k)


# ---- layouts and shards (no third-party package needed) ----------------------------------------------
def _rename_dense_mlp(folder, to: str) -> None:
    """Rewrite layer 0's dense MLP names: ``mlp.X_proj`` -> ``block_sparse_moe.X_proj`` (transformers 5.x)."""
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    out = {k.replace("layers.0.mlp.", f"layers.0.{to}."): v for k, v in tensors.items()}
    save_file(out, str(path), metadata={"format": "pt"})


def test_both_dense_mlp_layouts_load_the_same_weights(tmp_path):
    model = _model()
    moonshot = save_pretrained(model, tmp_path / "moonshot")
    hf_layout = save_pretrained(model, tmp_path / "hf")
    _rename_dense_mlp(hf_layout, "block_sparse_moe")
    assert "model.layers.0.block_sparse_moe.down_proj.weight" in load_file(str(hf_layout / "model.safetensors"))
    a, b = load_pretrained(moonshot), load_pretrained(hf_layout)
    _same_params(a, model)
    _same_params(b, model)
    assert _greedy(a) == _greedy(b) == _greedy(model)


def _shard(folder, parts: int) -> list[str]:
    """Split ``model.safetensors`` into ``parts`` shards with a ``model.safetensors.index.json``."""
    tensors = load_file(str(folder / "model.safetensors"))
    names = sorted(tensors)
    files = [f"model-{i + 1:05d}-of-{parts:05d}.safetensors" for i in range(parts)]
    wmap = {}
    for i, fname in enumerate(files):
        chunk = names[i::parts]
        save_file({n: tensors[n] for n in chunk}, str(folder / fname), metadata={"format": "pt"})
        wmap.update({n: fname for n in chunk})
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wmap}))
    return files


def _which_shard(name: str, folder, files: list[str]) -> str:
    """The shard file that the name safetensors was given opens. The loader hands it the open file
    (``/dev/fd/N``), not the shard's name, so the file is told by its identity (device, inode)."""
    st = os.stat(name)
    found = [f for f in files if os.path.samestat(st, os.stat(folder / f))]
    assert len(found) == 1, (name, found)
    return found[0]


def _open_shards(folder, files: list[str]) -> int:
    """How many descriptors of this process hold one of the shards (Linux: ``/proc/self/fd``)."""
    ids = {(s.st_dev, s.st_ino) for s in (os.stat(folder / f) for f in files)}
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            s = os.stat(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        held += (s.st_dev, s.st_ino) in ids
    return held


def test_a_sharded_checkpoint_loads_shard_by_shard(tmp_path, monkeypatch):
    import kda_ref.model.weights as w

    model = _model()
    folder = save_pretrained(model, tmp_path / "sharded")
    files = _shard(folder, 3)
    calls = []
    real_open, real_load = w.safe_open, w.load_file
    count_fds = os.path.isdir("/proc/self/fd")

    def spy(kind, real):
        def call(name, *a, **k):
            held = _open_shards(folder, files) if count_fds else 1
            calls.append((kind, _which_shard(name, folder, files), held))
            return real(name, *a, **k)
        return call

    monkeypatch.setattr(w, "safe_open", spy("header", real_open))  # header reads
    monkeypatch.setattr(w, "load_file", spy("data", real_load))  # tensor data
    loaded = load_pretrained(folder)
    _same_params(loaded, model)
    # every header is checked before any data is read; then each shard's data is read exactly once, in the
    # index's order, with no other shard open meanwhile
    assert [(k, f) for k, f, _ in calls] == [("header", f) for f in files] + [("data", f) for f in files]
    assert all(held == 1 for *_, held in calls), calls


def test_a_missing_shard_names_its_file(tmp_path):
    folder = save_pretrained(_model(), tmp_path / "sharded")
    files = _shard(folder, 3)
    (folder / files[1]).unlink()
    with pytest.raises(CheckpointError, match=rf"{files[1]}: shard missing from .* \(the index puts \d+ tensors in it"):
        load_pretrained(folder)


# ---- the tokenizer a folder ships ------------------------------------------------------------------------
def test_the_byte_tokenizer_marker_makes_text_prompts_work(tmp_path):
    folder = save_pretrained(_model(), tmp_path / "bytes")
    tok, why = load_tokenizer(folder)
    assert isinstance(tok, ByteTokenizer) and why is None
    out = LLM(load_pretrained(folder)).generate(["hi"], SamplingParams(max_tokens=2))[0]
    assert out.prompt_token_ids == [256, ord("h"), ord("i")] and isinstance(out.text, str)


def test_a_folder_without_a_tokenizer_refuses_text_and_accepts_ids(tmp_path):
    folder = save_pretrained(_model(), tmp_path / "none")
    (folder / "tokenizer_config.json").unlink()
    (folder / "tokenizer.json").unlink()
    tok, why = load_tokenizer(folder)
    assert tok is None and why == "the folder ships no tokenizer"
    llm = LLM(load_pretrained(folder))
    with pytest.raises(RequestError, match="ships no tokenizer.*pass token ids"):
        llm.generate(["hello"], SamplingParams(max_tokens=2))  # never silently byte-encoded
    assert len(llm.generate([PROMPT], SamplingParams(max_tokens=2))[0].token_ids) == 2


def test_a_custom_code_tokenizer_is_refused_with_the_reason_and_never_run(tmp_path):
    folder = save_pretrained(_model(), tmp_path / "code")
    (folder / "tokenizer.json").unlink()  # as Kimi's releases: tiktoken.model and code, no tokenizer.json
    marker = tmp_path / "code_ran"
    (folder / "tokenization_kimi.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    (folder / "tiktoken.model").write_text("not read\n")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "TikTokenTokenizer", "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer",
                                                                                 None]}}))
    tok, why = load_tokenizer(folder)
    assert tok is None and "needs Python code from the checkpoint" in why and "tiktoken.model" in why
    llm = LLM(load_pretrained(folder))
    assert llm.tokenizer is None and "never runs" in llm.tokenizer_note
    with pytest.raises(RequestError, match="needs Python code from the checkpoint"):
        llm.generate(["hello"], SamplingParams(max_tokens=2))
    assert not marker.exists()


def test_a_tokenizer_json_is_used_for_text_prompts(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    folder = save_pretrained(_model(), tmp_path / "tj")
    (folder / "tokenizer_config.json").unlink()
    vocab = {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3, "on": 4, "mat": 5}
    tk = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.save(str(folder / "tokenizer.json"))
    llm = LLM(load_pretrained(folder))
    out = llm.generate(["the cat sat on the mat"], SamplingParams(max_tokens=3, ignore_eos=True))[0]
    assert out.prompt_token_ids == [256, 1, 2, 3, 4, 1, 5]  # the model's BOS, then the folder's ids
    (folder / "tokenizer.json").write_text("{not json")
    tok, why = load_tokenizer(folder)
    assert tok is None and "tokenizer.json could not be read" in why


# ---- oracle: a folder written by transformers itself ---------------------------------------------------
@pytest.mark.oracle
def test_transformers_save_pretrained_folders_load_and_give_its_greedy_tokens(tmp_path):
    hf_kimi_linear()
    from transformers import KimiLinearForCausalLM

    model = _model()
    moonshot = save_pretrained(model, tmp_path / "moonshot")
    hf = KimiLinearForCausalLM.from_pretrained(moonshot, dtype=torch.float32).eval()
    written = tmp_path / "written"
    hf.save_pretrained(written, max_shard_size="2MB")  # transformers' own layout, sharded
    index = json.loads((written / "model.safetensors.index.json").read_text())
    names = set(index["weight_map"])
    assert "model.layers.0.block_sparse_moe.gate_proj.weight" in names
    assert not any(n.startswith("model.layers.0.mlp.") for n in names)
    assert len(set(index["weight_map"].values())) > 1
    with torch.no_grad():
        want = hf.generate(torch.tensor([PROMPT]), max_new_tokens=12, do_sample=False)[0, len(PROMPT):].tolist()
    assert _greedy(load_pretrained(moonshot)) == want
    assert _greedy(load_pretrained(written)) == want


def test_an_mxfp4_tensor_given_twice_is_refused_like_a_float_one(tmp_path):
    """K3's MTP layer is named both as the last decoder layer and as ``mtp.0``: a float tensor given under
    both names was refused, an MXFP4 pair was not -- the last one read won, silently (here: all zeros)."""
    import shutil
    from pathlib import Path

    import kda_ref

    src = Path(kda_ref.__file__).parent / "assets" / "trained_k3"
    L = json.loads((src / "config.json").read_text())["text_config"]["num_hidden_layers"]
    folder = tmp_path / "k3"
    shutil.copytree(src, folder)
    shard = folder / "model-00001-of-00001.safetensors"
    tensors = load_file(str(shard))
    base = next(k for k in tensors if k.endswith("weight_packed") and f"model.layers.{L}." in k)[:-len(".weight_packed")]
    alias = base.replace(f"language_model.model.layers.{L}.", "language_model.mtp.0.")
    tensors[alias + ".weight_packed"] = torch.zeros_like(tensors[base + ".weight_packed"])
    tensors[alias + ".weight_scale"] = tensors[base + ".weight_scale"].clone()
    save_file(tensors, str(shard), metadata={"format": "pt"})
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"].update({alias + s: shard.name for s in (".weight_packed", ".weight_scale")})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"the same tensor as .* \(both given as MXFP4\)"):
        load_pretrained(folder)


@pytest.mark.parametrize("own_head", [False, True])
def test_a_tied_config_uses_the_checkpoints_own_lm_head_when_it_has_one(tmp_path, own_head):
    """``tie_word_embeddings`` with no ``lm_head.weight`` in the checkpoint: the head is the embedding. With
    one: that tensor is the head, as vLLM 0.32 loads it (``ModelConfig.maybe_untie_word_embeddings``) and
    transformers' ``tie_weights`` decides. Both loaders, the same answer."""
    import dataclasses

    cfg = dataclasses.replace(ModelConfig.micro(), tie_word_embeddings=True)
    src = HybridModel(cfg, seed=0)
    save_pretrained(src, tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    head = torch.randn_like(tensors["model.embed_tokens.weight"])
    tensors.pop("lm_head.weight", None)
    if own_head:
        tensors["lm_head.weight"] = head
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    from kda_ref.model.weights import load_hf_state_dict

    into = HybridModel(cfg, seed=1)
    load_hf_state_dict(into, tensors)
    for m in (load_pretrained(tmp_path), into):
        want = head if own_head else tensors["model.embed_tokens.weight"]
        assert torch.equal(m.lm_head.weight, want)
        assert torch.equal(m.model.embed_tokens.weight, tensors["model.embed_tokens.weight"])


@pytest.mark.parametrize("k3", [False, True], ids=["kimi-linear", "k3-shards"])
def test_every_file_of_a_saved_checkpoint_has_the_mode_the_umask_allows(tmp_path, k3):
    """safetensors writes a private temporary file and renames it: the weights came out 0600 beside 0644
    config and tokenizer files, unreadable to another user of the checkpoint."""
    from kda_ref import ModelConfig
    from kda_ref.model import HybridModel

    old = os.umask(0o022)
    try:
        model = HybridModel(ModelConfig.k3_micro() if k3 else ModelConfig.micro(), seed=0)
        if k3:
            model.round_experts_to_mxfp4()
        folder = save_pretrained(model, tmp_path / "ckpt", **({"max_shard_bytes": 1 << 20} if k3 else {}))
    finally:
        os.umask(old)
    modes = {f.name: f.stat().st_mode & 0o777 for f in folder.iterdir()}
    assert any(n.endswith(".safetensors") for n in modes) and set(modes.values()) == {0o644}, modes
