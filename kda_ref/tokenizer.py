"""A byte-level tokenizer: UTF-8 bytes are ids 0..255, then a few specials. No download, no merges.

Works offline for any text, English and Chinese alike (a Chinese character is 3 byte tokens).
"""

from __future__ import annotations

BOS, EOS, PAD = 256, 257, 258
SPECIALS = {BOS: "<bos>", EOS: "<eos>", PAD: "<pad>"}


class ByteTokenizer:
    vocab_size = 259
    max_token_chars = 1  # a token is one byte, so at most one character (RequestChecker's check before encoding)
    bos_token_id, eos_token_id, pad_token_id = BOS, EOS, PAD

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        if not isinstance(text, str):
            raise ValueError(f"text: expected str, got {type(text).__name__}")
        ids = list(text.encode("utf-8"))
        return [BOS, *ids] if add_bos else ids

    def decode(self, ids: list[int]) -> str:
        """Bytes back to text. Specials are dropped; ids past the byte vocabulary (a model's vocabulary
        may be larger than this tokenizer's) and broken UTF-8 sequences become U+FFFD."""
        out = bytearray()
        for i in ids:
            i = int(i)
            if i < 0:
                raise ValueError(f"ids: negative token id {i}")
            if i < 256:
                out.append(i)
            elif i not in SPECIALS:
                out.extend("\ufffd".encode())
        return out.decode("utf-8", errors="replace")

    def token_str(self, i: int) -> str:
        """A printable label for one token (for axes in the visualizer)."""
        if i in SPECIALS:
            return SPECIALS[i]
        if not 0 <= i < 256:
            return f"<{i}>"
        c = chr(i)
        return c if 32 <= i < 127 else f"\\x{i:02x}"


# ---- tokenizers of checkpoint folders -------------------------------------------------------------------
TOKENIZER_CONFIG = "tokenizer_config.json"
TOKENIZER_JSON = "tokenizer.json"
BYTE_TOKENIZER_CLASS = "KdaRefByteTokenizer"  # what save_pretrained writes for the models of this project
MAX_BYTE_VOCAB = 1024  # a model built in-process uses bytes only if its vocabulary is this small
# Bounds on what load_tokenizer reads (the files are read whole, then parsed): Hugging Face's largest
# tokenizer_config.json files (Gemma 3's added-token tables) are ~1.2 MB, its largest tokenizer.json files
# (262k-token vocabularies with their merges) ~35 MB.
MAX_TOKENIZER_CONFIG_BYTES = 16 << 20
MAX_TOKENIZER_JSON_BYTES = 64 << 20


class TokenizerFileError(ValueError):
    """A tokenizer file that is not a regular file, is larger than its bound, or cannot be read or
    written (the message starts with ``path:``). A readable file that holds no usable tokenizer is not
    an error: :func:`load_tokenizer` says why not instead."""


BYTE_MARKER = "kda_ref_tokenizer"  # tokenizer_config.json key: "byte" -> ByteTokenizer (transformers ignores it)
# the byte tokenizer's chat template as Hugging Face stores one (the server's ByteChatTemplate renders the same)
BYTE_CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _bytes_to_unicode() -> dict[int, str]:
    """The byte-level pre-tokenizer's printable stand-in for each byte (GPT-2's table, which the
    ``tokenizers`` library's ``ByteLevel`` uses): printable Latin-1 bytes stand for themselves, the others
    for code points from 256 on, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def byte_tokenizer_json() -> dict:
    """:class:`ByteTokenizer` as a Hugging Face ``tokenizer.json``: a byte-level BPE with no merges whose
    token for byte ``b`` has id ``b``, the specials at 256-258, and ``<bos>`` put first when special tokens
    are added (as the engine does for a text prompt). ``AutoTokenizer`` then encodes and decodes exactly as
    the engine (``tests/test_tokenizer_hf.py``). Written by hand: saving needs no ``tokenizers`` package."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    bos = {"SpecialToken": {"id": SPECIALS[BOS], "type_id": 0}}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in SPECIALS.items()],
        "normalizer": None, "pre_tokenizer": byte_level, "decoder": byte_level,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {SPECIALS[BOS]: {"id": SPECIALS[BOS], "ids": [BOS],
                                                              "tokens": [SPECIALS[BOS]]}}},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {c: b for b, c in _bytes_to_unicode().items()}, "merges": []},
    }


def write_byte_tokenizer_config(folder, config, error: type[Exception] = TokenizerFileError) -> None:
    """Write :class:`ByteTokenizer` into a checkpoint folder as transformers reads a tokenizer
    (``tokenizer.json`` and a standard ``tokenizer_config.json``: ``PreTrainedTokenizerFast``, the special
    tokens, the chat template), marked for this engine (:data:`BYTE_MARKER`). Written by
    ``save_pretrained``. A file there that is not a regular file (a FIFO would block the write) is
    ``error`` naming ``path``."""
    import json
    from pathlib import Path

    from .utils.files import create_regular

    data = {"tokenizer_class": "PreTrainedTokenizerFast", BYTE_MARKER: "byte",
            "bos_token": SPECIALS[BOS], "eos_token": SPECIALS[EOS], "pad_token": SPECIALS[PAD],
            "bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id,
            "model_max_length": config.max_position_embeddings, "chat_template": BYTE_CHAT_TEMPLATE,
            # "<eos>" typed in a prompt is text, as ByteTokenizer encodes it, not the special token
            "split_special_tokens": True,
            "note": "UTF-8 bytes are ids 0..255, then <bos> <eos> <pad> (tokenizer.json: a byte-level BPE, no merges)"}
    for name, obj in ((TOKENIZER_JSON, byte_tokenizer_json()), (TOKENIZER_CONFIG, data)):
        with create_regular(Path(folder) / name, error) as f:
            f.write(json.dumps(obj, indent=2, ensure_ascii=False).encode("utf-8"))


def _read_tokenizer_file(path, limit: int, error: type[Exception]) -> bytes | None:
    """The bytes of the tokenizer file ``path``, or ``None`` if there is none (no such name, or a link
    to nothing). A regular file of at most ``limit`` bytes only, opened non-blocking: anything else, or
    a file that cannot be read, is ``error`` naming ``path`` (a FIFO there would block the loader, a
    link to ``/dev/zero`` read without end)."""
    from .utils.files import read_regular

    try:
        return read_regular(path, limit, error, f"a {path.name}")
    except FileNotFoundError:
        return None
    except OSError as e:  # no permission, a broken disk
        raise error(f"path: cannot read {path} ({e.strerror or type(e).__name__})") from None


class HFTokenizer:
    """A ``tokenizer.json`` (Hugging Face ``tokenizers`` format: data, no code) behind the same
    ``encode`` / ``decode`` / ``token_str`` as :class:`ByteTokenizer`. ``split_special_tokens`` (the
    folder's ``tokenizer_config.json`` key, as transformers reads it): a special token's text in a prompt
    is encoded as text, not as the special token (transformers' default, and this class's, is the token)."""

    def __init__(self, tok, split_special_tokens: bool = False):
        if split_special_tokens:  # tokenizers >= 0.15 (an older one fails here, and the folder reads as ids only)
            tok.encode_special_tokens = True
        self._tok, self._split = tok, bool(split_special_tokens)
        self.vocab_size = tok.get_vocab_size()
        self._max_chars: int | None = None

    @property
    def max_token_chars(self) -> int:
        """The most characters one token's text has (its longest vocabulary entry): a text longer than
        ``n * max_token_chars`` has more than ``n`` tokens (RequestChecker's length check before encoding)."""
        if self._max_chars is None:
            self._max_chars = max((len(t) for t in self._tok.get_vocab(with_added_tokens=True)), default=1)
        return self._max_chars

    def __reduce__(self):
        """Pickled with the flag: the ``tokenizers`` object drops ``encode_special_tokens`` when pickled, and
        the engine's tokenizer is sent to the server's process and to disaggregation workers."""
        return HFTokenizer, (self._tok, self._split)

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def token_str(self, i: int) -> str:
        return self._tok.id_to_token(int(i)) or f"<{i}>"


def load_tokenizer(folder, error: type[Exception] = TokenizerFileError) -> tuple[object | None, str | None]:
    """The tokenizer a checkpoint folder ships, if it can be used without running code from the folder:
    ``(tokenizer, None)``, or ``(None, why not)``. Its ``tokenizer_config.json`` and ``tokenizer.json``
    are read as regular files of at most :data:`MAX_TOKENIZER_CONFIG_BYTES` /
    :data:`MAX_TOKENIZER_JSON_BYTES` bytes: one that is not (a FIFO, a device, a larger file) is
    ``error`` naming ``path`` (``load_pretrained`` passes its ``ConfigError``), not a "why not"."""
    import json
    from pathlib import Path

    folder = Path(folder)
    raw = _read_tokenizer_file(folder / TOKENIZER_CONFIG, MAX_TOKENIZER_CONFIG_BYTES, error)
    cfg = {}
    if raw is not None:
        try:
            cfg = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # not UTF-8, bad JSON, nested too deeply
            return None, f"{TOKENIZER_CONFIG} is not valid JSON ({type(e).__name__})"
        if not isinstance(cfg, dict):
            return None, f"{TOKENIZER_CONFIG} is not a JSON object"
    if cfg.get("tokenizer_class") == BYTE_TOKENIZER_CLASS or cfg.get(BYTE_MARKER) == "byte":
        return ByteTokenizer(), None
    raw = _read_tokenizer_file(folder / TOKENIZER_JSON, MAX_TOKENIZER_JSON_BYTES, error)
    if raw is not None:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            return None, "its tokenizer.json needs the 'tokenizers' package, which is not installed"
        try:
            return HFTokenizer(Tokenizer.from_str(raw.decode("utf-8")), cfg.get("split_special_tokens") is True), None
        except Exception as e:  # noqa: BLE001 -- a malformed file: say so, accept token ids
            return None, f"its tokenizer.json could not be read ({type(e).__name__}: {str(e)[:120]})"
    shipped = sorted(p.name for p in folder.iterdir()
                     if p.name.startswith(("tokeniz", "tiktoken")) or p.suffix == ".model" or p.name == "vocab.json")
    if shipped or "auto_map" in cfg:
        return None, (f"its tokenizer ({', '.join(shipped) or TOKENIZER_CONFIG}) needs Python code from the "
                      f"checkpoint or a format this engine does not read, and code from a checkpoint folder never runs")
    return None, "the folder ships no tokenizer"

