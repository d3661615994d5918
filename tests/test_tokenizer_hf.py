"""The byte tokenizer as transformers reads it: ``AutoTokenizer.from_pretrained`` on a shipped model folder
(and on what ``save_pretrained`` writes) encodes and decodes exactly as the engine does, BOS included; its
chat template renders the server's; a folder with only a standard ``tokenizer.json`` is tokenised by the
``tokenizers`` library, no code from the folder run. Skipped without transformers (the ``oracle`` extra)."""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

transformers = pytest.importorskip("transformers")

from kda_ref.model import HybridModel, ModelConfig, save_pretrained  # noqa: E402
from kda_ref.server.chat import ByteChatTemplate  # noqa: E402
from kda_ref.tokenizer import (BYTE_MARKER, TOKENIZER_CONFIG, ByteTokenizer, HFTokenizer,  # noqa: E402
                               load_tokenizer)
from kda_ref.train import trained_path  # noqa: E402

BYTES = ByteTokenizer()


@pytest.fixture(scope="module")
def hf():
    return {kind: transformers.AutoTokenizer.from_pretrained(trained_path(kind)) for kind in ("kimi_linear", "k3")}


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=40))
@example(text="<eos>")  # a special token's text in a prompt is text: split_special_tokens in the folder
@example(text="a<bos>b<pad>")
def test_auto_tokenizer_encodes_and_decodes_as_the_engine(hf, text):
    for tok in hf.values():
        ids = tok(text)["input_ids"]
        assert ids == BYTES.encode(text, add_bos=True)  # <bos> first, then the UTF-8 bytes
        assert tok.decode(ids, skip_special_tokens=True) == BYTES.decode(ids) == text


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 258), max_size=24))
def test_any_ids_decode_alike_broken_utf8_included(hf, ids):
    assert hf["kimi_linear"].decode(ids, skip_special_tokens=True) == BYTES.decode(ids)


def test_the_specials_the_chat_template_and_the_engines_own_reading(hf):
    tok = hf["kimi_linear"]
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, len(tok)) == (256, 257, 258, 259)
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo"}]
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == ByteChatTemplate().render(msgs)
    engine_tok, why = load_tokenizer(trained_path())
    assert isinstance(engine_tok, ByteTokenizer) and why is None  # the marker: no tokenizers package needed


def test_save_pretrained_writes_what_auto_tokenizer_reads(tmp_path):
    model = HybridModel(ModelConfig.micro(), seed=0)
    save_pretrained(model, tmp_path / "m")
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "m")
    assert tok("中文 ok")["input_ids"] == BYTES.encode("中文 ok", add_bos=True)
    assert isinstance(load_tokenizer(tmp_path / "m")[0], ByteTokenizer)


def test_a_standard_tokenizer_json_is_read_by_the_tokenizers_library(tmp_path):
    """Without this project's marker, the folder's ``tokenizer.json`` is what tokenises (data, not code)."""
    folder = tmp_path / "std"
    shutil.copytree(trained_path(), folder)
    cfg = json.loads((folder / TOKENIZER_CONFIG).read_text())
    del cfg[BYTE_MARKER]
    (folder / TOKENIZER_CONFIG).write_text(json.dumps(cfg))
    tok, why = load_tokenizer(folder)
    assert isinstance(tok, HFTokenizer) and why is None
    assert tok.encode("héllo 中") == BYTES.encode("héllo 中") and tok.decode(BYTES.encode("héllo 中")) == "héllo 中"


@pytest.mark.parametrize("split", [True, False])
def test_a_standard_folder_encodes_special_token_text_as_auto_tokenizer_does(tmp_path, split):
    """A folder read through its ``tokenizer.json`` honours ``split_special_tokens`` as transformers does:
    ``"<eos>"`` in a prompt is the special token by default, its five bytes when the folder says so."""
    folder = tmp_path / "std"
    shutil.copytree(trained_path(), folder)
    cfg = json.loads((folder / TOKENIZER_CONFIG).read_text())
    del cfg[BYTE_MARKER]
    cfg["split_special_tokens"] = split
    (folder / TOKENIZER_CONFIG).write_text(json.dumps(cfg))
    ours = load_tokenizer(folder)[0]
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    for text in ("<eos>x", "a<bos>b", "plain"):
        assert ours.encode(text) == theirs(text, add_special_tokens=False)["input_ids"]
    assert (ours.encode("<eos>") == [257]) is not split
    import pickle  # the engine's tokenizer crosses to the server's process and the disaggregation workers

    assert pickle.loads(pickle.dumps(ours)).encode("<eos>") == ours.encode("<eos>")
