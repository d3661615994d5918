"""The Lab: run a workload of your own on the real engine, record its trace, compare two configurations.

    run = run_lab(trained_model(), ["Hello", "Hello again"], SamplingParams(max_tokens=16),
                  prefix_cache="radix", checkpoint_policy="sglang")
    run.outputs[0].token_ids      # == LLM(model, prefix_cache="radix", ...).generate(...)[0].token_ids
    run.jsonl(); run.chrome()     # the trace (JSONL, the pages' upload format) and a Chrome trace
    run.totals()                  # prompt tokens computed vs reused, checkpoint bytes, peak pool, ...

Modes: :data:`MODES` (``docs/article.md#s9``, multi-turn reuse); sizes bounded by :data:`LIMITS` and checked
before anything runs (a bad input is a :class:`LabError`); checkpoint folders only from below
:data:`MODEL_DIRS_ENV`. Design notes: ``docs/visualizer.md#the-lab``.
"""

from __future__ import annotations

import io
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from kda_ref import LLM, EngineConfig, RequestOutput, SamplingParams
from kda_ref.cache.options import CACHE_OPTION_TYPES, prefix_cache_modes
from kda_ref.cache.picture import BLOCK_STEPS, TREE_STEPS, cache_picture  # noqa: F401 (the figures read the keys here)
from kda_ref.engine.config import CacheConfig, SchedulerConfig, StaticDecodeConfig
from kda_ref.speculative import SpecConfig
from kda_ref.speculative.drafters import DRAFTERS
from kda_ref.utils.config_fields import field_specs
from kda_ref.utils.limits import MAX_PATH_CHARS
from kda_ref.trace import TraceEvent, TraceOverflow, TraceRecorder, to_chrome_trace
from kda_ref.trace.header import engine_header
from kda_ref.trace.events import RequestFinished, ScheduleDecision
from ..i18n import LocalizedError

MODES = ("batch", "sequential", "conversation")
MODEL_DIRS_ENV = "KDA_VIZ_MODEL_DIRS"  # os.pathsep-separated folders the Lab may load checkpoints from
MAX_EVENTS = 400_000
MAX_FOLDER_ENTRIES = 1000  # a checkpoint folder holds a config, a tokenizer and its shards: a few dozen files


@dataclass(frozen=True)
class Limits:
    """What one Lab run may ask for (a page's request must finish in seconds on two cores)."""

    prompt_bytes: int = 2000  # UTF-8 bytes of one typed prompt or turn
    requests: int = 8  # prompts, turns or workload requests
    new_tokens: int = 64  # max_tokens of each request
    prompt_tokens: int = 1024  # token ids of one request's prompt (a conversation's grows with each turn)


LIMITS = Limits()


class LabError(LocalizedError):
    """A Lab input the engine must not run (too large, empty, not allowed); carries an i18n key."""


# ---- inputs -----------------------------------------------------------------------------------------
def check_prompts(prompts, limits: Limits = LIMITS) -> list:
    """Typed prompts (str) or token-id lists, bounded; a :class:`LabError` naming the first bad one."""
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise LabError("lab.err.no_prompts")
    if len(prompts) > limits.requests:
        raise LabError("lab.err.too_many", n=len(prompts), max=limits.requests)
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            if not p.strip():
                raise LabError("lab.err.empty", i=i + 1)
            if len(p.encode("utf-8")) > limits.prompt_bytes:
                raise LabError("lab.err.prompt_bytes", i=i + 1, n=len(p.encode("utf-8")), max=limits.prompt_bytes)
        elif isinstance(p, (list, tuple)) and p and all(type(t) is int for t in p):
            if len(p) > limits.prompt_tokens:
                raise LabError("lab.err.prompt_tokens", i=i + 1, n=len(p), max=limits.prompt_tokens)
        else:
            raise LabError("lab.err.empty", i=i + 1)
    return list(prompts)


def sampling_params(max_tokens: int, temperature: float = 0.0, seed: int = 0) -> SamplingParams:
    """The page's sampling settings (every request runs to ``max_tokens``: the runs compare lengths)."""
    try:
        return SamplingParams(max_tokens=int(max_tokens), temperature=float(temperature), seed=int(seed),
                              ignore_eos=True)
    except ValueError as e:
        raise LabError("lab.err.engine", msg=str(e)) from None


def family_names() -> tuple[str, ...]:
    from kda_ref.workloads import FAMILIES

    return tuple(FAMILIES)


def check_sampling(sampling: SamplingParams, limits: Limits = LIMITS) -> SamplingParams:
    if not isinstance(sampling, SamplingParams):
        raise LabError("lab.err.sampling", got=type(sampling).__name__)
    if sampling.max_tokens > limits.new_tokens:
        raise LabError("lab.err.new_tokens", n=sampling.max_tokens, max=limits.new_tokens)
    return sampling


def split_prompts(text: str) -> list[str]:
    """The page's text box: prompts separated by a line holding only ``---``."""
    parts, cur = [], []
    for line in text.splitlines():
        if line.strip() == "---":
            parts.append("\n".join(cur))
            cur = []
        else:
            cur.append(line)
    parts.append("\n".join(cur))
    return [p.strip("\n") for p in parts if p.strip()]


SCALES = ("tiny", "large")  # kda_ref.workloads' scales; "large" prompts mostly exceed the Lab's bounds


def family_prompts(family: str, seed: int, num_requests: int, vocab_size: int, scale: str = "tiny",
                   limits: Limits = LIMITS) -> list[list[int]]:
    """The first ``num_requests`` prompts of a :mod:`kda_ref.workloads` family at ``scale``, in arrival
    order, bounded like typed prompts (a ``"large"`` prompt longer than the bound is a message)."""
    from kda_ref.workloads import FAMILIES, WorkloadError, make

    if family not in FAMILIES:
        raise LabError("lab.err.family", family=family, families=", ".join(FAMILIES))
    if type(num_requests) is not int or not 1 <= num_requests <= limits.requests:
        raise LabError("lab.err.too_many", n=num_requests, max=limits.requests)
    try:
        w = make(family, seed=seed, num_requests=num_requests, vocab_size=vocab_size, scale=scale)
    except WorkloadError as e:
        raise LabError("lab.err.workload", msg=str(e)) from None
    return check_prompts([list(r.prompt) for r in w.requests[:num_requests]], limits)


def allowed_model_dirs(environ=os.environ) -> list[Path]:
    """The folders named in :data:`MODEL_DIRS_ENV` (resolved; empty when it is unset)."""
    raw = environ.get(MODEL_DIRS_ENV, "")
    return [Path(p).expanduser().resolve() for p in raw.split(os.pathsep) if p.strip()]


def _path_text(path) -> str:
    """``path`` as text the OS can look up: no NUL byte, at most ``MAX_PATH_CHARS`` characters."""
    text = str(path)
    if "\0" in text:
        raise LabError("lab.err.path_nul")
    if len(text) > MAX_PATH_CHARS:
        raise LabError("lab.err.path_long", n=len(text), max=MAX_PATH_CHARS)
    return text


def _short(text: str, n: int = 120) -> str:
    """A path as a message shows it: at most ``n`` characters."""
    return text if len(text) <= n else text[: n - 1] + "…"


def _below(p: Path, roots: list[Path]) -> bool:
    return any(p == r or r in p.parents for r in roots)


def _check_files(folder: Path, shown: str, roots: list[Path]) -> None:
    """Every entry of ``folder`` (the loader opens its config, weights and tokenizer files by name or by
    pattern) resolves below an allowed root and is a regular file or a folder: a symlink to a file
    elsewhere, a FIFO or a device is refused, and so the whole folder."""
    with os.scandir(folder) as it:
        entries = [e for _, e in zip(range(MAX_FOLDER_ENTRIES + 1), it)]
    if len(entries) > MAX_FOLDER_ENTRIES:
        raise LabError("lab.err.too_many_files", path=shown, max=MAX_FOLDER_ENTRIES)
    for entry in entries:
        target = Path(entry.path).resolve()
        if not _below(target, roots):
            raise LabError("lab.err.escapes", path=shown, name=entry.name, target=str(target), env=MODEL_DIRS_ENV)
        try:
            mode = os.stat(target).st_mode
        except FileNotFoundError:  # a dangling link inside the roots: nothing to read (the loader names it)
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise LabError("lab.err.not_a_file", path=shown, name=entry.name)


def check_model_folder(path: str, environ=os.environ) -> Path:
    """``path`` resolved, if it is a folder below one the person who started the app allowed and every
    file in it resolves below one too; a path the OS cannot take (a NUL byte, longer than any path, a
    symlink loop) is a :class:`LabError` as well."""
    roots = allowed_model_dirs(environ)
    if not roots:
        raise LabError("lab.err.no_model_dirs", env=MODEL_DIRS_ENV)
    text = _path_text(path)
    try:
        p = Path(text).expanduser().resolve()
        if not _below(p, roots):
            raise LabError("lab.err.not_allowed", path=text, env=MODEL_DIRS_ENV)
        if not p.is_dir() or not (p / "config.json").is_file():
            raise LabError("lab.err.unreadable", path=text)
        _check_files(p, text, roots)
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop (Python < 3.13)
        why = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise LabError("lab.err.bad_path", path=_short(text), why=why) from None
    return p


MODEL_KINDS = ("trained", "trained_k3", "tiny", "folder")


def load_model(kind: str, folder: str | None = None):
    """The Lab's model: ``"trained"`` (the shipped Kimi-Linear model), ``"trained_k3"`` (the shipped K3 demo,
    which has an MTP layer to draft with), ``"tiny"`` (random weights) or ``"folder"`` (a checkpoint folder
    allowed by :data:`MODEL_DIRS_ENV`, loaded with the engine's safe loader; callers cache it)."""
    from . import common as cs

    if kind == "trained":
        return cs.trained_model()
    if kind == "trained_k3":
        return cs.trained_model(kind="k3")
    if kind == "tiny":
        return cs.tiny_model()
    if kind != "folder":
        raise LabError("lab.err.engine", msg=f"model: must be one of {MODEL_KINDS}, got {kind!r}")
    path = check_model_folder(folder or "")
    from kda_ref.model import load_pretrained
    from kda_ref.model.size import check_fits
    from kda_ref.model import ModelConfig

    try:
        check_fits(ModelConfig.from_json(path))
        return load_pretrained(path, chunk_size=cs.CHUNK)
    except (ValueError, OSError) as e:  # the loader's typed errors: a bad config, a bad or missing file
        raise LabError("lab.err.load", path=str(folder), msg=str(e)) from None


# ---- the engine form ------------------------------------------------------------------------------
# The settings the Lab's form offers, by group: (group, config class); a prefix cache's group is its kind,
# one per option class the engine registers (kda_ref.cache.options.CACHE_OPTION_TYPES). Every documented
# field of those classes is offered, built from its documentation and range
# (kda_ref.utils.config_fields), so the form cannot offer what the engine would refuse, and a field added
# to a part appears here with nothing to edit. Not offered (left at their defaults), and why:
NOT_OFFERED = {
    "max_model_len": "the model's own; the Lab bounds its prompts itself",
    "page_size": "the prefix cache's own",
    "torch_compile": "a C++ build per bucket: tens of seconds on two cores",
}
# (and whole parts: the kernel backend -- Triton runs in its interpreter on a CPU, minutes -- and context
# parallelism -- worker processes per run)
FORM_GROUPS = (("scheduler", SchedulerConfig), ("cache", CacheConfig), *CACHE_OPTION_TYPES.items(),
               ("speculative", SpecConfig), ("static", StaticDecodeConfig))
# tighter bounds than the engine's for a page that must answer in seconds on two cores
LAB_MAX = {"max_num_seqs": 64, "max_num_batched_tokens": 4096, "memory_budget_bytes": 1 << 30}
PREFIX_CACHES = prefix_cache_modes()  # the caches registered when the app starts


def form_fields() -> dict[str, list[dict]]:
    """group -> the specs of its offered fields (``key``: ``LLM``'s keyword; ``max`` capped by
    :data:`LAB_MAX`), in :data:`FORM_GROUPS` order; an object-valued field (a draft model) is never offered."""
    out = {}
    for group, cls in FORM_GROUPS:
        out[group] = []
        for s in field_specs(cls):
            if s["name"] in NOT_OFFERED or s.get("kind") == "object":
                continue
            spec = dict(s, key=s.get("flat", s["name"]))
            if spec["key"] == "speculative":  # the drafters the form can build: not one that needs a draft model
                spec["choices"] = [n for n, d in DRAFTERS.items() if not d.needs_model]
            if spec["key"] in LAB_MAX:
                spec["max"] = min(spec.get("max") or LAB_MAX[spec["key"]], LAB_MAX[spec["key"]])
            out[group].append(spec)
    return out


def engine_kwargs(values: dict, prefix_cache: str, speculative: bool) -> dict:
    """``LLM``'s keywords from the form's ``values`` (keyword -> value): the scheduler, pool and static
    settings always, the chosen prefix cache's options only with it, the speculative ones only with
    speculation (the drafter the form chose: n-gram unless it says MTP)."""
    if prefix_cache not in PREFIX_CACHES:
        raise LabError("lab.err.engine", msg=f"prefix_cache: must be one of {PREFIX_CACHES}, got {prefix_cache!r}")
    groups = form_fields()
    keep = ["scheduler", "cache", "static"] + [g for g in groups if g == prefix_cache] + \
        (["speculative"] if speculative else [])  # a cache's options group is named after its kind
    kw = {s["key"]: values[s["key"]] for g in keep for s in groups[g] if s["key"] in values}
    kw["prefix_cache"] = prefix_cache
    if speculative:
        kw.setdefault("speculative", "ngram")
    return kw


# ---- the run ----------------------------------------------------------------------------------------
class _ProgressRecorder(TraceRecorder):
    """A recorder that also reports progress (engine steps, requests finished) to ``callback``."""

    def __init__(self, callback, total_requests: int):
        super().__init__(max_events=MAX_EVENTS)
        self.callback, self.total, self.finished, self.steps = callback, total_requests, 0, 0

    def emit(self, event: TraceEvent) -> None:
        super().emit(event)
        if isinstance(event, RequestFinished):
            self.finished += 1
        elif isinstance(event, ScheduleDecision):
            self.steps += 1
        else:
            return
        if self.callback is not None:
            self.callback(min(1.0, self.finished / self.total), self.steps, self.finished)


@dataclass
class LabRun:
    """One Lab run: the outputs (in prompt order), the trace, the engine's stats and the header that
    makes the trace readable by the pages (layer layout, pool sizes, radix-tree snapshots)."""

    outputs: list[RequestOutput]
    trace: list[TraceEvent]
    stats: dict
    header: dict
    wall_s: float
    config: EngineConfig
    prompts: list[list[int]] = field(default_factory=list)  # the token ids each request ran
    texts: list[str | None] = field(default_factory=list)  # each output decoded (None: no tokenizer)

    def totals(self) -> dict:
        return run_totals(self.stats, self.wall_s)

    def jsonl(self) -> str:
        """The trace in the JSONL format every page's upload box reads."""
        from kda_ref.trace import write_jsonl

        buf = io.StringIO()
        write_jsonl(self.trace, buf, metadata=self.header)
        return buf.getvalue()

    def chrome(self) -> dict:
        """The trace as a Chrome trace (Perfetto, chrome://tracing)."""
        return to_chrome_trace(self.trace, kda_layers=self.header["kda_layers"], mla_layers=self.header["mla_layers"])


def run_totals(stats: dict, wall_s: float) -> dict:
    """The run's totals from the engine's stats: prompt tokens computed vs reused, prompt tokens computed
    more than once (a preempted request starts again), checkpoint bytes, peak pool, steps, tokens/s."""
    prompt, computed, reused = stats["prompt_tokens"], stats["computed_prompt_tokens"], stats["cached_prompt_tokens"]
    return {"steps": stats["steps"], "prompt_tokens": prompt, "computed_prompt_tokens": computed,
            "reused_prompt_tokens": reused, "recomputed_prompt_tokens": max(0, computed + reused - prompt),
            "generated_tokens": stats["generated_tokens"], "forward_tokens": stats["forward_tokens"],
            "preemptions": stats["preemptions"], "checkpoint_bytes": stats.get("checkpoint_bytes", 0),
            "peak_pool_bytes": stats["peak_pool_bytes"]["total"], "budget_bytes": stats["budget_bytes"],
            "spec_accepted_tokens": stats.get("spec_accepted_tokens", 0),
            "spec_draft_tokens": stats.get("spec_draft_tokens", 0),
            "wall_s": wall_s, "tokens_per_s": stats["generated_tokens"] / wall_s if wall_s > 0 else 0.0}


def _engine_config(config: EngineConfig | None, engine_args: dict) -> EngineConfig:
    if config is not None and engine_args:
        raise LabError("lab.err.config_and_args", args=", ".join(sorted(engine_args)))
    try:
        return config if config is not None else EngineConfig.from_kwargs(**engine_args)
    except ValueError as e:
        raise LabError("lab.err.engine", msg=str(e)) from None


def _turns(prompts: list, mode: str) -> list[list]:
    if mode not in MODES:
        raise LabError("lab.err.mode", mode=mode, modes=", ".join(MODES))
    return [prompts] if mode == "batch" else [[p] for p in prompts]


def _turn_ids(llm: LLM, text) -> list[int]:
    """A follow-up turn's own tokens (no BOS: it continues the conversation)."""
    if not isinstance(text, str):
        return list(text)
    if llm.tokenizer is None:
        raise LabError("lab.err.engine", msg=f"prompt: text needs this model's tokenizer ({llm.tokenizer_note})")
    try:
        return list(llm.tokenizer.encode(text))
    except (ValueError, UnicodeError) as e:
        raise LabError("lab.err.engine", msg=f"prompt: the text cannot be encoded ({e})") from None


def _engine_checks(llm: LLM, prompt, sampling: SamplingParams) -> list[int]:
    """``prompt``'s token ids as the engine sees them (a text gets its BOS), checked by the engine
    (:meth:`~kda_ref.LLM.check_request`: nothing queued)."""
    try:
        return llm.check_request(prompt, sampling)[0]
    except ValueError as e:
        raise LabError("lab.err.engine", msg=str(e)) from None


def check_turns(llm: LLM, prompts: list, sampling: SamplingParams, mode: str,
                limits: Limits = LIMITS) -> list[list]:
    """Every request's prompt bounded in tokens before the first one runs; returns what each turn adds
    (a conversation's turn ``i > 0``: its own tokens; otherwise the prompt as given).

    A prompt is counted as the engine's tokenizer makes it (a 2,000-byte text is 2,001 byte tokens with
    its BOS). A conversation's turn ``i`` resends every earlier prompt and answer, so its prompt is at
    most turn ``i - 1``'s bound + ``max_tokens`` + its own tokens: each turn's bound is checked against
    ``limits.prompt_tokens`` (and, with placeholder tokens of that length, against the engine's own
    length and memory checks) before turn 1 runs, not when the conversation reaches it."""
    parts, bound = [], 0
    for i, p in enumerate(prompts):
        if mode == "conversation" and i > 0:
            new = _turn_ids(llm, p)
            bound += sampling.max_tokens + len(new)
        else:
            new, bound = p, len(_engine_checks(llm, p, sampling))
        if bound > limits.prompt_tokens:
            key = "lab.err.turn_tokens" if mode == "conversation" and i > 0 else "lab.err.prompt_tokens"
            raise LabError(key, i=i + 1, n=bound, max=limits.prompt_tokens)
        if mode == "conversation" and i > 0:
            _engine_checks(llm, [0] * bound, sampling)  # its length and peak memory, as the engine will see them
        parts.append(new)
    return parts


def run_lab(model, prompts, sampling: SamplingParams, *, config: EngineConfig | None = None, mode: str = "batch",
            progress=None, limits: Limits = LIMITS, **engine_args) -> LabRun:
    """Run ``prompts`` on ``LLM(model, **engine_args)`` (or ``config=``) with a trace recorder.

    ``mode``: :data:`MODES`. ``progress(fraction, steps, finished)`` is called as steps run.
    The outputs are exactly what ``LLM(model, **engine_args).generate`` returns for the same prompts
    (the engine is the same; only a recorder listens). Raises :class:`LabError` for a bad input.
    """
    prompts, sampling = check_prompts(prompts, limits), check_sampling(sampling, limits)
    cfg = _engine_config(config, engine_args)
    turns = _turns(prompts, mode)
    rec = _ProgressRecorder(progress, len(prompts))
    try:
        llm = LLM(model, config=cfg, tracer=rec)
    except ValueError as e:
        raise LabError("lab.err.engine", msg=str(e)) from None
    parts = check_turns(llm, prompts, sampling, mode, limits)
    outputs, tree_steps, t0 = [], [], time.perf_counter()  # tree_steps: the cache after each turn
    steps_key = None  # the header key of those snapshots (kda_ref.cache.picture.SNAPSHOT_FORMATS)
    for i, turn in enumerate(turns):
        if mode == "conversation" and outputs:  # the previous prompt, its answer, then this turn
            last = outputs[-1]
            turn = [[*last.prompt_token_ids, *last.token_ids, *parts[i]]]
        first, cached = llm.stats()["steps"] + 1, llm.stats()["cached_prompt_tokens"]
        try:
            outs = llm.generate(turn, sampling)
        except ValueError as e:  # the engine's own request checks (a prompt longer than max_model_len, ...)
            raise LabError("lab.err.engine", msg=str(e)) from None
        except TraceOverflow:  # a run too long to record whole
            raise LabError("lab.err.trace_full", max=MAX_EVENTS) from None
        outputs += outs
        out = outs[-1]
        snap = cache_picture(llm.prefix_cache, out.prompt_token_ids, out.token_ids, out.req_id, f"#{i + 1}",
                              [first, llm.stats()["steps"]], llm.stats()["cached_prompt_tokens"] - cached)
        if snap is not None:
            steps_key = snap[0]
            tree_steps.append(snap[1])
    wall = time.perf_counter() - t0
    return LabRun(outputs=outputs, trace=list(rec.events), stats=llm.stats(), wall_s=wall, config=cfg,
                  prompts=[list(o.prompt_token_ids) for o in outputs],
                  texts=[_decode(llm, o.token_ids) for o in outputs],
                  header=_header(llm, prompts, sampling, mode, tree_steps, steps_key))


def _decode(llm: LLM, ids) -> str | None:
    return None if llm.tokenizer is None else llm.tokenizer.decode(list(ids))


def _header(llm: LLM, prompts: list, sampling: SamplingParams, mode: str, cache_steps: list[dict],
            steps_key: str | None) -> dict:
    head = {**engine_header(llm), "model": "lab", "scenario": "lab", "mode": mode,
            "max_tokens": sampling.max_tokens, "num_prompts": len(prompts),
            "preemptions": llm.stats()["preemptions"]}
    if cache_steps:  # the radix tree (the checkpoint-placement page's format) or the block table after each turn
        head[steps_key] = cache_steps
    return head


def chrome_json(header: dict, events: list[TraceEvent]) -> str:
    """A trace (a Lab run's, or any the pages read) as Chrome-trace JSON text; the layer layout from the
    header where it says (:func:`~model_viz.scenarios.engine_trace.layer_layout`, the pages' reading)."""
    from .engine_trace import layer_layout

    kda, mla = layer_layout(header, events)
    return json.dumps(to_chrome_trace(events, kda_layers=kda, mla_layers=mla), separators=(",", ":"))


# ---- two configurations -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """Two runs of the same workload: per-request token equality and the totals side by side."""

    same_tokens: list[bool]  # per request: the two runs produced the same token ids
    greedy: bool  # the check must hold (greedy sampling); with temperature > 0 it is informative only
    rows: list[dict]  # {"name", "a", "b", "differs"} per total

    @property
    def ok(self) -> bool:
        return all(self.same_tokens) or not self.greedy


def compare(a: LabRun, b: LabRun, sampling: SamplingParams) -> Comparison:
    if len(a.outputs) != len(b.outputs):
        raise LabError("lab.err.compare_sizes", a=len(a.outputs), b=len(b.outputs))
    same = [x.token_ids == y.token_ids for x, y in zip(a.outputs, b.outputs)]
    ta, tb = a.totals(), b.totals()
    rows = [{"name": k, "a": ta[k], "b": tb[k], "differs": ta[k] != tb[k]} for k in ta if k not in ("wall_s",)]
    rows += [{"name": "config:" + k, "a": str(v), "b": str(b.header["engine"].get(k)), "differs": True}
             for k, v in a.header["engine"].items() if b.header["engine"].get(k) != v]
    return Comparison(same_tokens=same, greedy=sampling.temperature == 0.0, rows=rows)
