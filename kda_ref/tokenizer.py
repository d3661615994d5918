"""A byte-level tokenizer: UTF-8 bytes are ids 0..255, then a few specials. No download, no merges.

Works offline for any text, English and Chinese alike (a Chinese character is 3 byte tokens).
"""

from __future__ import annotations

BOS, EOS, PAD = 256, 257, 258
SPECIALS = {BOS: "<bos>", EOS: "<eos>", PAD: "<pad>"}


class ByteTokenizer:
    vocab_size = 259
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
