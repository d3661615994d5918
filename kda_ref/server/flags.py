"""``kda-ref serve``'s command line, parsed and checked without importing torch.

Every :class:`~kda_ref.engine.EngineConfig` keyword is a flag, made from the configuration's own field
specs (:func:`engine_specs`): each flag's name, type, choices, range and help. The configuration imports
without torch (its choices are registries that name their implementations: :mod:`kda_ref.utils.lazy`), so
a keyword added there is a flag here with nothing to regenerate. A bad value is one line naming its flag and
exit code 2 before torch loads (``kda_ref/cli.py`` parses here first); what needs the model (a cross-field
rule, a folder's config) is the library's check after it loads, named the same way.
"""

from __future__ import annotations

import argparse
import os
import re

from ..utils import server_threads
from ..utils.limits import MAX_THREADS
from .heartbeat import HEARTBEAT_TIMEOUT_S
from .http import BODY_TIMEOUT_S, HEADER_TIMEOUT_S

MAX_BODY_BYTES = 1 << 20  # 1 MiB: a prompt of the longest context this CPU serves, many times over
MAX_TRACE_BYTES = 32 << 20  # the live trace ring's records, as JSON, at most about this many bytes
MODEL_NAMES = {"trained": "the small Kimi-Linear-layout model trained in this repo (default)",
               "trained-k3": "the trained Kimi K3 demo (with its MTP layer)",
               "random-tiny": "ModelConfig.tiny() with random weights from --seed",
               "random-micro": "ModelConfig.micro() with random weights (the tests' model)"}


def engine_specs() -> dict:
    """The engine flags' specs from the configuration classes: ``{"flags": [spec, ...], "names": [every
    field name], "prefix_caches": [...]}`` (a torch-free import of the configuration)."""
    from ..cache.options import CACHE_OPTION_TYPES
    from ..engine.config import EngineConfig, config_parts
    from ..speculative.config import SpecConfig
    from ..utils.config_fields import field_specs

    classes = (EngineConfig, *config_parts().values(), *CACHE_OPTION_TYPES.values(), SpecConfig)
    flags, seen, names = [], set(), set()
    for cls in classes:
        for s in field_specs(cls):
            key = s.get("flat", s["name"])
            names.add(key)
            if s.get("kind") == "object" or key in seen or (s["name"] == "prefix_cache" and "flat" not in s):
                continue  # CacheConfig's prefix_cache is an options object: --prefix-cache is made below
            seen.add(key)
            spec = {k: v for k, v in s.items() if k not in ("name", "flat")}
            if "choices" in spec:
                spec["choices"] = list(spec["choices"])  # names only (some map to classes)
            flags.append(dict(spec, key=key, speculative=cls is SpecConfig))
    return {"flags": flags, "names": sorted(names), "prefix_caches": list(CACHE_OPTION_TYPES)}


SPECS = engine_specs()
ENGINE_FLAG_NAMES = {"prefix_cache", *SPECS["names"]}


def _flag_type(spec: dict):
    kind = spec.get("kind", "int")
    if kind in ("number", "float"):
        return float
    return str if kind == "str" else int


def add_engine_flags(p: argparse.ArgumentParser) -> None:
    """One flag per engine keyword (default: not given, so the configuration's default holds)."""
    g = p.add_argument_group("engine (every EngineConfig keyword; see docs/architecture.md)")
    g.add_argument("--prefix-cache", choices=("none", *SPECS["prefix_caches"]), default=None,
                   help="the prefix cache: none, radix (SGLang's) or block (vLLM's)")
    for s in SPECS["flags"]:
        flag, help_ = "--" + s["key"].replace("_", "-"), f"{s['doc']} ({_default_text(s)})"
        if s.get("kind") == "bool":
            g.add_argument(flag, dest=s["key"], action=argparse.BooleanOptionalAction, default=None, help=help_)
        else:
            g.add_argument(flag, dest=s["key"], type=_flag_type(s), choices=s.get("choices"), default=None,
                           help=help_)


def _default_text(spec: dict) -> str:
    """A flag's default as its help says it: speculation is off unless ``--speculative`` names a drafter, and
    the other speculative flags' defaults hold only then."""
    if spec["key"] == "speculative":
        return "default: off"
    return f"default {spec['default']!r}" + ("; with --speculative" if spec.get("speculative") else "")


def engine_kwargs(a: argparse.Namespace) -> dict:
    """``LLM``'s keywords from the flags given (the others keep their defaults)."""
    keys = ["prefix_cache", *(s["key"] for s in SPECS["flags"])]
    return {k: getattr(a, k) for k in keys if getattr(a, k, None) is not None}


class _Parser(argparse.ArgumentParser):
    """One line for a bad command line, naming the flag (``error: --max-waiting: must be >= 1, got 0``),
    exit code 2: the ``kda-ref`` command's convention (``kda_ref/cli.py``)."""

    def error(self, message: str):
        head, sep, rest = message.partition(": ")
        if sep and head.startswith("argument "):
            message = f"{head.removeprefix('argument ')}: {rest}"
        elif sep and head in ENGINE_FLAG_NAMES:  # the library names its keyword; here it is a flag
            message = f"{_flag(head)}: {rest}"
        elif sep and head in ("path", "model"):  # the loader names the folder it could not use
            message = f"MODEL: {rest}"
        # keywords the library quotes inside its message ('block_size', prefix_cache='none') as flags too
        message = re.sub(r"'(\w+)'|\b(\w+)=", lambda m: _flag_in(m), message)
        self.exit(2, f"error: {message}\n")


def _flag(keyword: str) -> str:
    return "--" + keyword.replace("_", "-")


def _flag_in(m: re.Match) -> str:
    quoted, assigned = m.group(1), m.group(2)
    if quoted in ENGINE_FLAG_NAMES:
        return f"'{_flag(quoted)}'"
    if assigned in ENGINE_FLAG_NAMES:
        return f"{_flag(assigned)}="
    return m.group(0)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kda-ref serve", description="Serve the engine over OpenAI's HTTP API (docs/serving.md).")
    p.add_argument("model", nargs="?", default="trained",
                   help="; ".join(f"{k}: {v}" for k, v in MODEL_NAMES.items()) + "; or a checkpoint folder")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free one, printed)")
    p.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME",
                   help="the model's name(s) in the API: answers carry the first, requests may use any "
                   "(default: MODEL)")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' (default: the "
                   "KDA_REF_API_KEY environment variable; none: open)")
    p.add_argument("--max-waiting", type=int, default=64, help="requests accepted and not yet running before "
                   "new ones get 503 + Retry-After (default 64)")
    p.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES, help="largest request body (413 past it)")
    p.add_argument("--trace-steps", type=int, default=256, help="engine steps the live trace keeps for the Live "
                   "page (default 256; 0: no live trace)")
    p.add_argument("--trace-mb", type=float, default=MAX_TRACE_BYTES / (1 << 20), help="the live trace's "
                   "records, as JSON, at most about this many MiB (default 32; the oldest steps leave first)")
    p.add_argument("--shutdown-timeout", type=float, default=30.0, help="on SIGTERM, seconds open requests get to "
                   "finish before they are cancelled (default 30)")
    p.add_argument("--kv-events-config", type=_kv_events, default=None, metavar="JSON", help="publish the "
                   "prefix cache's KV events on vLLM's ZMQ wire, configured as vLLM's --kv-events-config (e.g. "
                   "'{\"enable_kv_cache_events\": true, \"endpoint\": \"tcp://*:5557\", \"replay_endpoint\": "
                   "\"tcp://*:5558\"}'; docs/serving.md)")
    _add_connection_flags(p)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: every core but "
                   "one, which the HTTP event loop keeps; at most 16)")
    p.add_argument("--engine-heartbeat-timeout", type=float, default=HEARTBEAT_TIMEOUT_S, help="seconds the engine "
                   "process may go silent before it counts as unresponsive: /health 503, new requests 503, open "
                   f"streams ended (default {HEARTBEAT_TIMEOUT_S:g}; docs/serving.md)")
    p.add_argument("--engine-in-process", action="store_true", help="run the engine in a thread of the HTTP "
                   "server's process (default: a process of its own, so the two never wait for one GIL)")
    add_engine_flags(p)
    return p


def _kv_events(text: str):
    """``--kv-events-config``'s value, checked before torch loads (an error names the field)."""
    from ..kv_events.config import parse_kv_events_config

    try:
        return parse_kv_events_config(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _add_connection_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--header-timeout", type=float, default=HEADER_TIMEOUT_S, help="seconds a connection has to "
                   f"finish a request's headers before it is closed (default {HEADER_TIMEOUT_S:g})")
    p.add_argument("--body-timeout", type=float, default=BODY_TIMEOUT_S, help="seconds a request's body may go "
                   f"without a byte arriving before the client is answered 408 and closed (default {BODY_TIMEOUT_S:g})")
    p.add_argument("--max-connections", type=int, default=None, help="open connections held at most; past it a "
                   "new one is answered 503 and closed (default: the file limit, raised to its hard limit, less 64)")
    p.add_argument("--half-close", action="store_true", help="answer a non-streaming request whose client "
                   "half-closed after sending it (a client that closed and left then runs to its end: TCP cannot "
                   "tell the two apart; streams are answered either way)")


# (flag's dest, lowest, highest or None): the server's own numbers
SERVER_RANGES = (("port", 0, 65535), ("max_waiting", 1, None), ("max_body_bytes", 1024, None),
                 ("trace_steps", 0, None), ("threads", 1, MAX_THREADS), ("max_connections", 1, None))


def _check_served_names(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """``--served-model-name`` takes every word after it (vLLM's aliases), so a MODEL written after the flag
    becomes a name while the default model loads: refused, naming both, as are empty or repeated names."""
    names = a.served_model_name or []
    if names and a.model == p.get_default("model") and (names[-1] in MODEL_NAMES or os.path.isdir(names[-1])):
        p.error(f"--served-model-name: {names[-1]!r} is a model; write MODEL before the flag "
                f"(kda-ref serve {names[-1]} --served-model-name {' '.join(names[:-1]) or 'NAME'})")
    if any(not n.strip() for n in names) or len(set(names)) != len(names):
        p.error(f"--served-model-name: names must be non-empty and distinct, got {names}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The checked command line (exit 2 with one line naming the flag otherwise); torch is not imported."""
    from ..utils.config_fields import check_field

    p = build_parser()
    a = p.parse_args(argv)
    if a.threads is None:
        a.threads = server_threads()
    for name, lo, hi in SERVER_RANGES:
        v = getattr(a, name)
        if v is not None and (v < lo or (hi is not None and v > hi)):
            p.error(f"--{name.replace('_', '-')}: must be >= {lo}" + (f" and <= {hi}" if hi is not None else "")
                    + f", got {v}")
    key = a.api_key if a.api_key is not None else os.environ.get("KDA_REF_API_KEY")
    if key is not None and (key != key.strip() or not key or not key.isprintable()):  # headers are stripped:
        p.error("--api-key: must be non-empty printable text without leading or trailing spaces (a client's "
                "header loses them, so no client could match it)")
    for name, lo, hi, unit in (("shutdown_timeout", 0, 86400, "seconds"), ("trace_mb", 1 / 1024, 65536, "MiB"),
                               ("header_timeout", 1e-3, 3600, "seconds"), ("body_timeout", 1e-3, 3600, "seconds"),
                               ("engine_heartbeat_timeout", 0.5, 3600, "seconds")):
        if not lo <= getattr(a, name) <= hi:
            p.error(f"--{name.replace('_', '-')}: must be in [{lo:g}, {hi:g}] {unit}, got {getattr(a, name)}")
    _check_served_names(p, a)
    for s in SPECS["flags"]:  # each engine flag against its field's rules, as the library will check it
        try:
            check_field(s["key"], getattr(a, s["key"]), {**s, "optional": True})
        except ValueError as e:
            p.error(str(e))
    return a
