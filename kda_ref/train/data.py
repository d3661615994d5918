"""Training data: multi-query associative recall (MQAR) and byte-level text from the repo's own docs.

**MQAR** (Arora et al., "Zoology", 2023) in a readable byte form, ``<bos> aQ fX cM kB |fX aQ kB``; loss and
accuracy count only the answer tokens. Every sequence is a pure function of ``(seed, index)``; the held-out
split uses another seed (:data:`HELD_OUT_SEED_OFFSET`). **Text**: the UTF-8 bytes of ``README.md`` and
``docs/**/*.md``, the last :data:`HELD_OUT_FRACTION` of every file held out; :func:`corpus_hash` is the SHA-256
of the exact training text, recorded with the weights.
Design notes: ``docs/training.md#the-tasks``
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from ..tokenizer import BOS

KEYS = bytes(range(ord("a"), ord("z") + 1))
VALUES = bytes(range(ord("A"), ord("Z") + 1))
PAIR_SEP, QUERY_SEP = ord(" "), ord("|")
HELD_OUT_SEED_OFFSET = 1_000_003
HELD_OUT_FRACTION = 0.1
IGNORE = -100  # label of tokens that carry no loss (torch's cross_entropy ignore_index)

REPO_ROOT = Path(__file__).resolve().parents[2]


# ---- MQAR ----------------------------------------------------------------------------------------
@dataclass
class RecallSample:
    ids: list[int]  # input tokens, starting with <bos>
    labels: list[int]  # next-token target per position, IGNORE except where the next token is an answer
    pairs: list[tuple[int, int]]  # (key byte, value byte) in write order
    key_pos: list[int]  # position of each pair's key token
    value_pos: list[int]  # position of each pair's value token
    query_pos: list[int]  # position of each queried key token (its label is the answer)
    query_pair: list[int]  # which pair each query asks for


def make_recall(gen: torch.Generator, n_pairs: int, n_queries: int | None = None) -> RecallSample:
    """One MQAR sequence with ``n_pairs`` pairs and ``n_queries`` (default all) queries, drawn from ``gen``."""
    if not 1 <= n_pairs <= len(KEYS):
        raise ValueError(f"n_pairs: must lie in [1, {len(KEYS)}], got {n_pairs}")
    nq = n_pairs if n_queries is None else n_queries
    if not 1 <= nq <= n_pairs:
        raise ValueError(f"n_queries: must lie in [1, n_pairs={n_pairs}], got {nq}")
    keys = [KEYS[i] for i in torch.randperm(len(KEYS), generator=gen)[:n_pairs].tolist()]
    vals = [VALUES[i] for i in torch.randint(len(VALUES), (n_pairs,), generator=gen).tolist()]
    ids, key_pos, value_pos = [BOS], [], []
    for j, (k, v) in enumerate(zip(keys, vals)):
        if j:
            ids.append(PAIR_SEP)
        key_pos.append(len(ids))
        ids.append(k)
        value_pos.append(len(ids))
        ids.append(v)
    ids.append(PAIR_SEP)
    ids.append(QUERY_SEP)
    order = torch.randperm(n_pairs, generator=gen)[:nq].tolist()
    query_pos = []
    for j, p in enumerate(order):
        if j:
            ids.append(PAIR_SEP)
        query_pos.append(len(ids))
        ids.append(keys[p])
        ids.append(vals[p])
    labels = [IGNORE] * len(ids)
    for qp in query_pos:
        labels[qp] = ids[qp + 1]
    return RecallSample(ids, labels, list(zip(keys, vals)), key_pos, value_pos, query_pos, order)


def parse_recall(ids: list[int]) -> RecallSample | None:
    """Read a recall prompt back into a :class:`RecallSample` (``None`` if ``ids`` is not one).

    Format, as :func:`make_recall` writes it: ``<bos> kV kV ... | kV kV ...`` — key-value pairs
    separated by spaces, then ``|`` and queries (a key, then its answer if present). Used by the
    visualizer to probe what the state stores for a prompt a reader typed.
    """
    ids = list(ids)
    if not ids or ids[0] != BOS or QUERY_SEP not in ids:
        return None
    bar = ids.index(QUERY_SEP)
    pairs, key_pos, value_pos = [], [], []
    i = 1
    while i < bar:
        if ids[i] == PAIR_SEP:
            i += 1
            continue
        if i + 1 >= bar or ids[i] not in KEYS or ids[i + 1] not in VALUES:
            return None
        pairs.append((ids[i], ids[i + 1]))
        key_pos.append(i)
        value_pos.append(i + 1)
        i += 2
    keys = [k for k, _ in pairs]
    if not pairs or len(set(keys)) != len(keys):
        return None
    query_pos, query_pair = [], []
    for j in range(bar + 1, len(ids)):
        if ids[j] in KEYS and ids[j] in keys and (j == bar + 1 or ids[j - 1] == PAIR_SEP):
            query_pos.append(j)
            query_pair.append(keys.index(ids[j]))
    if not query_pos:
        return None
    labels = [IGNORE] * len(ids)
    for qp, p in zip(query_pos, query_pair):
        labels[qp] = pairs[p][1]
    return RecallSample(ids, labels, pairs, key_pos, value_pos, query_pos, query_pair)


def recall_stream(seed: int, index: int, min_pairs: int, max_pairs: int) -> RecallSample:
    """Sample ``index`` of the MQAR stream of ``seed`` (pair count uniform in [min_pairs, max_pairs])."""
    gen = torch.Generator().manual_seed(seed * 1_000_000_007 + index)
    n = int(torch.randint(min_pairs, max_pairs + 1, (1,), generator=gen))
    return make_recall(gen, n)


def held_out_recall(seed: int, count: int, min_pairs: int, max_pairs: int) -> list[RecallSample]:
    """The held-out MQAR split: ``count`` sequences from a stream the training never draws from."""
    return [recall_stream(seed + HELD_OUT_SEED_OFFSET, i, min_pairs, max_pairs) for i in range(count)]


# ---- text ----------------------------------------------------------------------------------------
def corpus_files(root: str | Path = REPO_ROOT) -> list[Path]:
    """``README.md`` and every ``docs/**/*.md`` under ``root``, sorted by relative path."""
    root = Path(root)
    files = sorted(root.glob("docs/**/*.md"))
    if (root / "README.md").is_file():
        files = [root / "README.md", *files]
    return files


@dataclass
class Corpus:
    train: bytes  # the exact training text
    held_out: bytes
    files: list[str]  # relative paths, in order

    @property
    def sha256(self) -> str:
        return corpus_hash(self.train)

    def to_text(self) -> str:
        """A single-file snapshot (``train`` then ``held_out`` with a marker line) for exact re-runs."""
        return (self.train + SNAPSHOT_MARK + self.held_out).decode("utf-8")

    @classmethod
    def from_text(cls, text: str, files: list[str] | None = None) -> "Corpus":
        raw = text.encode("utf-8")
        if SNAPSHOT_MARK not in raw:
            raise ValueError("corpus snapshot: missing the held-out marker line")
        train, held = raw.split(SNAPSHOT_MARK, 1)
        return cls(train, held, files or [])


SNAPSHOT_MARK = b"\n\x00--- held out ---\x00\n"


def corpus_hash(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest()


def build_corpus(root: str | Path = REPO_ROOT, files: list[Path] | None = None) -> Corpus:
    """Read the docs into a train / held-out split (the last 10 % of each file, at a line start)."""
    root = Path(root)
    files = corpus_files(root) if files is None else files
    if not files:
        raise ValueError(f"root: no README.md or docs/**/*.md under {root}")
    train, held, names = [], [], []
    for f in files:
        rel = f.relative_to(root).as_posix() if f.is_absolute() and f.is_relative_to(root) else str(f)
        raw = f.read_bytes()
        cut = int(len(raw) * (1 - HELD_OUT_FRACTION))
        nl = raw.find(b"\n", cut)
        cut = len(raw) if nl < 0 else nl + 1
        header = f"<!-- {rel} -->\n".encode()
        train.append(header + raw[:cut])
        held.append(header + raw[cut:])
        names.append(rel)
    return Corpus(b"\n".join(train), b"\n".join(held), names)


def text_window(text: bytes, gen: torch.Generator, length: int) -> list[int]:
    """``<bos>`` + a random window of ``length - 1`` bytes of ``text`` (starting at a byte that is no
    UTF-8 continuation byte, so a window never opens inside a Chinese character)."""
    n = length - 1
    if len(text) <= n:
        return [BOS, *text]
    start = int(torch.randint(0, len(text) - n, (1,), generator=gen))
    while start > 0 and (text[start] & 0xC0) == 0x80:
        start -= 1
    return [BOS, *text[start:start + n]]


def text_chunks(text: bytes, length: int) -> list[list[int]]:
    """Non-overlapping ``<bos>``-prefixed chunks covering ``text`` (the held-out LM evaluation)."""
    n = length - 1
    return [[BOS, *text[i:i + n]] for i in range(0, len(text), n) if len(text[i:i + n]) > 1]


# ---- batches -------------------------------------------------------------------------------------
@dataclass
class Batch:
    ids: torch.Tensor  # [T] packed
    labels: torch.Tensor  # [T] next-token targets (IGNORE where no loss)
    seq_lens: list[int]
    kinds: list[str]  # "recall" | "text" per sequence


def pack(seqs: list[tuple[list[int], list[int], str]]) -> Batch:
    ids, labels, lens, kinds = [], [], [], []
    for s_ids, s_labels, kind in seqs:
        ids.extend(s_ids)
        labels.extend(s_labels)
        lens.append(len(s_ids))
        kinds.append(kind)
    return Batch(torch.tensor(ids), torch.tensor(labels), lens, kinds)


def lm_labels(ids: list[int]) -> list[int]:
    return [*ids[1:], IGNORE]
