"""The KV-event wire: three ZMQ frames per message and a msgpack payload, as vLLM and SGLang send them.

A message is ``[topic, seq, payload]`` (``seq`` 8 bytes big-endian, from 0); a batch is
``[ts, events, data_parallel_rank]`` (vLLM's ``EventBatch``); each event is a map tagged by ``"type"``
(vLLM since PR #42892): ``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``. Replay goes over a
ROUTER socket and ends with ``[b"", -1, b""]``.

:func:`decode_payload` reads vLLM's maps and older positional arrays and SGLang 0.5.23's shapes into
:class:`Stored`, :class:`Removed`, :class:`Cleared`; a payload it cannot read raises :class:`WireError`.
Design notes (every field and shape):
``docs/serving.md#5b-kv-events-the-prefix-cache-on-vllms-wire-and-kda-ref-watch``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import msgspec

END_SEQ = (-1).to_bytes(8, "big", signed=True)  # the replay stream's end marker (second frame)
BlockHash = int | bytes


class _Event(msgspec.Struct, tag=True, omit_defaults=True):
    """The tagged base: msgspec writes the class name under ``"type"`` (the wire's tag)."""


class BlockStoredMsg(_Event, tag="BlockStored"):
    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None


class BlockRemovedMsg(_Event, tag="BlockRemoved"):
    block_hashes: list[BlockHash]
    medium: str | None
    group_idx: int | None = None


class AllBlocksClearedMsg(_Event, tag="AllBlocksCleared"):
    pass


class BatchMsg(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list[BlockStoredMsg | BlockRemovedMsg | AllBlocksClearedMsg]
    data_parallel_rank: int | None = None


_encoder = msgspec.msgpack.Encoder()


def encode_batch(events: list, rank: int | None = None, ts: float | None = None) -> bytes:
    """One batch's payload (what :func:`decode_payload` and vLLM's own decoder read)."""
    return _encoder.encode(BatchMsg(time.time() if ts is None else ts, events, rank))


# ---- the decoder's model ----------------------------------------------------------------------------
class WireError(ValueError):
    """A payload that is not a KV-event batch of any known shape (names what was wrong)."""


@dataclass(frozen=True)
class Stored:
    block_hashes: tuple
    parent: BlockHash | None
    token_ids: tuple
    block_size: int
    group: int | None = None
    kind: str | None = None
    medium: str | None = None


@dataclass(frozen=True)
class Removed:
    block_hashes: tuple
    group: int | None = None
    medium: str | None = None


@dataclass(frozen=True)
class Cleared:
    pass


@dataclass
class Batch:
    ts: float
    events: list = field(default_factory=list)
    rank: int | None = None


_STORED_ARRAY = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
                 "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window")
_REMOVED_ARRAY = ("block_hashes", "medium", "group_idx")


def _as_map(ev) -> dict:
    """An event as a map with ``"type"``: a map as sent, or a positional array named by vLLM's field order."""
    if isinstance(ev, dict):
        if "type" not in ev:
            raise WireError(f"an event map without 'type': keys {sorted(ev)[:6]}")
        return ev
    if not isinstance(ev, (list, tuple)) or not ev or not isinstance(ev[0], str):
        raise WireError(f"an event must be a tagged map or an array starting with its tag, got {str(ev)[:60]}")
    names = {"BlockStored": _STORED_ARRAY, "BlockRemoved": _REMOVED_ARRAY, "AllBlocksCleared": ()}.get(ev[0])
    if names is None:
        raise WireError(f"unknown event tag {ev[0]!r}")
    return {"type": ev[0], **dict(zip(names, ev[1:]))}


def _tokens(raw) -> tuple:
    """Token ids; SGLang under EAGLE sends ``[previous, current]`` pairs: the current token of each."""
    return tuple(t[-1] if isinstance(t, (list, tuple)) else t for t in raw or ())


def _event(ev):
    m = _as_map(ev)
    kind = m["type"]
    try:
        if kind == "BlockStored":
            return Stored(tuple(m["block_hashes"]), m.get("parent_block_hash"), _tokens(m.get("token_ids")),
                          int(m["block_size"]), m.get("group_idx"), m.get("kv_cache_spec_kind"), m.get("medium"))
        if kind == "BlockRemoved":
            return Removed(tuple(m["block_hashes"]), m.get("group_idx"), m.get("medium"))
    except (KeyError, TypeError, ValueError) as e:
        raise WireError(f"{kind}: a field is missing or of the wrong type ({type(e).__name__}: {e})") from None
    if kind == "AllBlocksCleared":
        return Cleared()
    raise WireError(f"unknown event type {kind!r}")


def decode_payload(payload: bytes) -> Batch:
    """One batch, whatever shape its engine sent (module docstring)."""
    try:
        raw = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as e:
        raise WireError(f"not msgpack ({e})") from None
    if isinstance(raw, dict):  # a batch as a map
        raw = [raw.get("ts"), raw.get("events"), raw.get("data_parallel_rank", raw.get("attn_dp_rank"))]
    if not isinstance(raw, (list, tuple)) or len(raw) < 2 or not isinstance(raw[1], (list, tuple)):
        raise WireError(f"a batch must be [ts, events, rank], got {str(raw)[:60]}")
    ts = raw[0] if isinstance(raw[0], (int, float)) else 0.0
    rank = raw[2] if len(raw) > 2 and isinstance(raw[2], int) else None
    return Batch(float(ts), [_event(e) for e in raw[1]], rank)
