"""``--kv-events-config``: vLLM's ``KVEventsConfig`` (``vllm/config/kv_events.py``, 0.32.0), field for field.

Fields ``enable_kv_cache_events``, ``publisher``, ``endpoint`` (bound or connected by vLLM's bind rule),
``replay_endpoint``, ``buffer_steps``, ``hwm``, ``max_queue_size``, ``topic``, with vLLM's defaults. An
unknown field, a wrong type or a value out of range is a :class:`ValueError` naming the field (the command
line turns it into one line and exit 2).

Design notes (each field's default and meaning):
``docs/serving.md#5b-kv-events-the-prefix-cache-on-vllms-wire-and-kda-ref-watch``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

PUBLISHERS = ("null", "zmq")


@dataclass(frozen=True)
class KVEventsConfig:
    """The resolved configuration (module docstring); ``publisher`` is never None here."""

    enable_kv_cache_events: bool = False
    publisher: str = "null"
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""

    @property
    def publishes(self) -> bool:
        """Whether events are recorded and sent (vLLM's ``EventPublisherFactory.create`` makes a null
        publisher otherwise)."""
        return self.enable_kv_cache_events and self.publisher == "zmq"

    def as_dict(self) -> dict:
        """The JSON ``/kv_event_sources`` answers per rank (vLLM serialises its dataclass the same way)."""
        return dataclasses.asdict(self)


def is_bind_endpoint(endpoint: str) -> bool:
    """vLLM's rule (``ZmqEventPublisher._is_bind_endpoint``): bind wildcard and ipc / inproc addresses."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def _check_endpoint(name: str, v) -> str:
    if not isinstance(v, str) or not v.startswith(("tcp://", "ipc://", "inproc://")):
        raise ValueError(f"{name}: must be a ZMQ address tcp://HOST:PORT, ipc://PATH or inproc://NAME, got {v!r}")
    if v.startswith("tcp://"):
        port = v.rsplit(":", 1)[-1]
        if not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"{name}: a tcp address needs a port in [0, 65535], got {v!r}")
    return v


def _check(name: str, v, kind):
    if kind is bool:
        if not isinstance(v, bool):
            raise ValueError(f"{name}: must be true or false, got {v!r}")
    elif kind is int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: must be an integer >= 1, got {v!r}")
    elif not isinstance(v, str):
        raise ValueError(f"{name}: must be a string, got {v!r}")
    return v


_KINDS = {"enable_kv_cache_events": bool, "buffer_steps": int, "hwm": int, "max_queue_size": int, "topic": str}


def parse_kv_events_config(text: str | dict | None) -> KVEventsConfig:
    """``--kv-events-config`` (a JSON object, or the dict it parses to) as a :class:`KVEventsConfig`,
    with vLLM's defaults and its ``publisher`` default (``"zmq"`` when enabled, else ``"null"``)."""
    if text is None:
        return KVEventsConfig()
    try:
        raw = json.loads(text) if isinstance(text, str) else text
    except ValueError as e:
        raise ValueError(f"kv_events_config: not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"kv_events_config: must be a JSON object, got {type(raw).__name__}")
    fields = {f.name for f in dataclasses.fields(KVEventsConfig)}
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise ValueError(f"kv_events_config: unknown field {unknown[0]!r} (fields: {', '.join(sorted(fields))})")
    out = {k: _check(k, raw[k], kind) for k, kind in _KINDS.items() if k in raw}
    if "endpoint" in raw:
        out["endpoint"] = _check_endpoint("endpoint", raw["endpoint"])
    if raw.get("replay_endpoint") is not None:
        out["replay_endpoint"] = _check_endpoint("replay_endpoint", raw["replay_endpoint"])
    publisher = raw.get("publisher")
    if publisher is None:
        publisher = "zmq" if out.get("enable_kv_cache_events", False) else "null"
    if publisher not in PUBLISHERS:
        raise ValueError(f"publisher: must be one of {', '.join(PUBLISHERS)}, got {publisher!r}")
    return KVEventsConfig(**out, publisher=publisher)
