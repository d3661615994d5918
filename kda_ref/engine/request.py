"""Requests, sampling parameters and outputs (nano-vllm's ``Sequence`` / vLLM's ``Request``)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from enum import Enum

import torch

from ..cache.sequence import Sequence
from ..utils.limits import MAX_CONTEXT_TOKENS, MAX_TEMPERATURE, MIN_TEMPERATURE, SEED_RANGE

MAX_LOGPROBS = 20  # top logprobs a request may ask for (OpenAI's bound for completions' logprobs)
MAX_STOP_STRINGS = 16  # OpenAI takes up to 4, vLLM any number: a bound keeps each token's scan short
MAX_STOP_CHARS = 256
MAX_REPETITION_PENALTY = 10.0  # past it every seen token's logit is crushed toward zero: a client's mistake


class RequestError(ValueError):
    """A request the engine cannot take (names the argument); nothing in flight is affected."""


# MIN_TEMPERATURE: the value of vLLM's greedy threshold _SAMPLING_EPS (below it, logits / temperature overflows
# float32 for real logits; vLLM itself clamps 0 < T < _MAX_TEMP = 1e-2 up to 1e-2, with a warning);
# MAX_TEMPERATURE ours (flatter adds nothing); SEED_RANGE what torch.Generator.manual_seed accepts. They live
# in a torch-free module so that the command line checks its flags against them before torch is imported.


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class OutputKind(str, Enum):
    """Which outputs :meth:`LLM.step <kda_ref.LLM.step>` returns for a request (vLLM's
    ``RequestOutputKind``, ``vllm/sampling_params.py``; its OpenAI server asks ``DELTA`` of a stream and
    ``FINAL_ONLY`` otherwise, its offline ``LLM`` ``FINAL_ONLY``). Where we differ: vLLM's engine core
    sends every request's new token ids each step and its front end drops what the kind does not want;
    our engine is both, so it builds only what the kind asks. ``TOKENS`` is ours (vLLM has
    ``CUMULATIVE`` instead): the ids each step, the text once at the end -- what a server's latency
    metrics need of a request answered whole."""

    FINAL_ONLY = "final_only"  # the finished RequestOutput only
    TOKENS = "tokens"  # and a RequestDelta of new ids each step the request gains tokens (no text)
    DELTA = "delta"  # and a RequestDelta of new ids and the text they add


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 0.0  # 0 -> greedy; else >= MIN_TEMPERATURE
    top_k: int = 0  # 0 -> no top-k filter
    seed: int | None = None  # per-request sampling seed (temperature > 0), given to torch.Generator.manual_seed
    # as is (its CPU generator uses the low 32 bits); None: one mixed from the engine's seed and the request id
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    return_logits: bool = False  # keep the logits of every generated token (for tests and the app)
    # the sampler's features, as vLLM's SamplingParams names them (kda_ref.engine.sampling applies them in
    # vLLM's order: penalties, temperature, min_p, top_k, top_p)
    top_p: float = 1.0  # keep the smallest set of tokens whose probability reaches top_p (1: all)
    min_p: float = 0.0  # drop tokens below min_p x the most likely token's probability (0: none)
    presence_penalty: float = 0.0  # subtracted once from the logit of every token the output already holds
    frequency_penalty: float = 0.0  # subtracted per occurrence in the output so far
    repetition_penalty: float = 1.0  # logits of tokens seen in the prompt or output: / it if > 0, else x it
    logprobs: int | None = None  # each generated token's logprob and the top N (0..MAX_LOGPROBS)
    prompt_logprobs: int | None = None  # each prompt token's logprob and the top N (the request skips the cache)
    # strings that end the output where they appear in its text (which stops before them), as vLLM's stop;
    # needs the engine's tokenizer (kda_ref.engine.stopping.IncrementalDetokenizer)
    stop: tuple[str, ...] = ()
    output_kind: OutputKind = OutputKind.FINAL_ONLY  # what LLM.step returns while the request runs
    # derived once from the fields above (the sampler asks every step): whether a penalty changes the logits
    # (greedy decoding included), and whether sampling filters more than top_k does (top_p or min_p set)
    penalized: bool = field(init=False, repr=False, compare=False)
    filtered: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._check_basics()
        self._check_sampler()
        object.__setattr__(self, "penalized", (self.presence_penalty, self.frequency_penalty,
                                               self.repetition_penalty) != (0.0, 0.0, 1.0))
        object.__setattr__(self, "filtered", self.top_p < 1.0 or self.min_p > 0.0)

    def _check_sampler(self) -> None:
        for name, lo, hi, lo_open in (("top_p", 0.0, 1.0, True), ("min_p", 0.0, 1.0, False),
                                      ("presence_penalty", -2.0, 2.0, False), ("frequency_penalty", -2.0, 2.0, False),
                                      ("repetition_penalty", 0.0, MAX_REPETITION_PENALTY, True)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or not (lo < v <= hi if lo_open else lo <= v <= hi):
                raise RequestError(f"{name}: must be a number in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {v!r}")
            object.__setattr__(self, name, float(v))
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None and (not _is_int(v) or not 0 <= v <= MAX_LOGPROBS):
                raise RequestError(f"{name}: must be None or an int in [0, {MAX_LOGPROBS}], got {v!r}")

    def _check_basics(self) -> None:
        if not _is_int(self.max_tokens) or not 1 <= self.max_tokens <= MAX_CONTEXT_TOKENS:
            raise RequestError(f"max_tokens: must be an int in [1, {MAX_CONTEXT_TOKENS}] (no model's context holds "
                               f"more), got {str(self.max_tokens)[:40]}")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise RequestError(f"temperature: must be a finite number >= 0, got {t!r}")
        if 0 < t < MIN_TEMPERATURE:
            raise RequestError(f"temperature: {t!r} is below {MIN_TEMPERATURE}: dividing the logits by it overflows "
                               f"float32 (use 0 for greedy decoding)")
        if t > MAX_TEMPERATURE:
            raise RequestError(f"temperature: must be at most {MAX_TEMPERATURE:g}, got {t!r}")
        object.__setattr__(self, "temperature", float(t))
        if not _is_int(self.top_k) or self.top_k < 0:
            raise RequestError(f"top_k: must be an int >= 0, got {self.top_k!r}")
        if self.seed is not None and (not _is_int(self.seed) or not SEED_RANGE[0] <= self.seed <= SEED_RANGE[1]):
            raise RequestError(f"seed: must be None or an int in the 64-bit range, got {self.seed!r}")
        stops = self.stop_token_ids
        if isinstance(stops, (str, bytes)) or not isinstance(stops, (list, tuple, set, frozenset)):
            raise RequestError(f"stop_token_ids: must be a list or tuple of int token ids, got {type(stops).__name__}")
        bad = [x for x in stops if not _is_int(x) or x < 0][:1]  # a list: a None element is caught too
        if bad:
            raise RequestError(f"stop_token_ids: token ids must be ints >= 0, got {bad[0]!r}")
        self._check_stop()
        if not isinstance(self.output_kind, OutputKind):
            raise RequestError(f"output_kind: must be an OutputKind, got {self.output_kind!r}")
        for name in ("ignore_eos", "return_logits"):
            if not isinstance(getattr(self, name), bool):
                raise RequestError(f"{name}: must be True or False, got {getattr(self, name)!r}")
        object.__setattr__(self, "stop_token_ids", tuple(stops))

    def _check_stop(self) -> None:
        stop = (self.stop,) if isinstance(self.stop, str) else self.stop
        if not isinstance(stop, (list, tuple)) or len(stop) > MAX_STOP_STRINGS:
            raise RequestError(f"stop: must be a string or a list of at most {MAX_STOP_STRINGS} strings, got "
                               f"{str(self.stop)[:60]!r}")
        bad = [x for x in stop if not isinstance(x, str) or not 0 < len(x) <= MAX_STOP_CHARS][:1]  # None too
        if bad:
            raise RequestError(f"stop: each must be a non-empty string of at most {MAX_STOP_CHARS} characters, "
                               f"got {bad[0]!r:.60}")
        object.__setattr__(self, "stop", tuple(stop))


class RequestStatus(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(eq=False, kw_only=True)
class Request(Sequence):
    """A request of the engine: the :class:`~kda_ref.cache.Sequence` the pool and the prefix caches
    see (token ids, computed count, state slot, block table) plus sampling, status and metrics."""

    params: SamplingParams
    prompt_text: str | None = None
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: str | None = None
    error: str | None = None  # why the request failed (finish_reason == "error")
    num_preemptions: int = 0
    arrival_time: float = field(default_factory=time.perf_counter)
    first_token_time: float | None = None
    finish_time: float | None = None
    logits: list[torch.Tensor] = field(default_factory=list)
    generator: torch.Generator | None = None
    spec_slots: list[int] = field(default_factory=list)  # spec_state="slots": its 1 + k state slots
    num_cached_tokens: int | None = None  # prompt tokens its first admission took from the prefix cache
    spec_steps: int = 0  # speculative verify steps this request ran
    spec_accepted: int = 0  # draft tokens they accepted
    sample_logprobs: list[dict] = field(default_factory=list)  # params.logprobs: one per output token
    sent_tokens: int = 0  # output tokens already returned in a RequestDelta (LLM.step)
    sent_chars: int = 0  # characters of its text already returned in one
    prompt_logprobs: dict[int, dict] = field(default_factory=dict)  # params.prompt_logprobs: by prompt position
    # its text as it grows (stop strings), when the engine has a tokenizer: a stopping.IncrementalDetokenizer
    # (typed object: stopping imports this module, and this one stays below it)
    detok: object | None = None

    @property
    def text(self) -> str | None:
        """The output's text so far, what may be shown now (held back: an unfinished character, and what
        could still start a stop string); None without a tokenizer."""
        return None if self.detok is None else self.detok.text


@dataclass
class RequestOutput:
    req_id: int
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str | None
    finish_reason: str | None  # "stop" | "length" | "abort" | "error"
    metrics: dict
    logits: torch.Tensor | None = None  # [len(token_ids), vocab] when asked for
    error: str | None = None  # why the request failed (finish_reason == "error")
    # SamplingParams.logprobs: per output token {"token", "logprob", "rank", "top": [(id, logprob)]}
    logprobs: list[dict] | None = None
    # SamplingParams.prompt_logprobs: per prompt token, the same (None for the first: nothing precedes it)
    prompt_logprobs: list[dict | None] | None = None
    # what this output adds to the request's earlier RequestDeltas (all of it when there were none)
    new_token_ids: list[int] = field(default_factory=list)
    new_text: str = ""

    finished = True  # a RequestOutput is a request's end; a RequestDelta is not

    @classmethod
    def from_request(cls, req: Request, text: str | None) -> "RequestOutput":
        end = req.finish_time or time.perf_counter()
        metrics = {
            "prompt_tokens": len(req.prompt_token_ids),
            "output_tokens": len(req.output_token_ids),
            "preemptions": req.num_preemptions,
            "cached_tokens": req.num_cached_tokens or 0,  # prompt tokens the prefix cache gave it (first admission)
            "ttft_s": None if req.first_token_time is None else req.first_token_time - req.arrival_time,
            "latency_s": end - req.arrival_time,
        }
        if req.spec_steps:  # tokens per verify step: the accepted drafts plus the one the target adds
            metrics["spec_mean_accepted_length"] = (req.spec_accepted + req.spec_steps) / req.spec_steps
        logits = torch.stack(req.logits) if req.logits else None
        p = req.params
        prompt_lp = None if p.prompt_logprobs is None else \
            [None] + [req.prompt_logprobs.get(i) for i in range(1, len(req.prompt_token_ids))]
        tokens = list(req.output_token_ids)
        return cls(req.req_id, list(req.prompt_token_ids), tokens, text, req.finish_reason,
                   metrics, logits, req.error, logprobs=None if p.logprobs is None else list(req.sample_logprobs),
                   prompt_logprobs=prompt_lp, new_token_ids=tokens[req.sent_tokens:],
                   new_text=(text or "")[req.sent_chars:])


@dataclass
class RequestDelta:
    """What one step added to a running request whose ``output_kind`` is not ``FINAL_ONLY``: the new
    token ids and (``DELTA``) the text they settled (the detokenizer holds back an unfinished character
    and what could still start a stop string; the deltas and the final output's ``new_text`` add up to
    its text). vLLM's ``EngineCoreOutput`` (``vllm/v1/engine/__init__.py``) carries the same per step."""

    req_id: int
    new_token_ids: list[int]
    new_text: str = ""

    finished = False

    @classmethod
    def take(cls, req: Request) -> "RequestDelta | None":
        """The tokens (and, ``DELTA``, the text) ``req`` gained since its last delta, marked sent; None if
        nothing. For a request whose ``output_kind`` is not ``FINAL_ONLY``: :meth:`LLM.step
        <kda_ref.LLM.step>` asks for those alone."""
        new = req.output_token_ids[req.sent_tokens:]
        text = ""
        if req.params.output_kind is OutputKind.DELTA and req.detok is not None:
            shown = req.detok.text
            text, req.sent_chars = shown[req.sent_chars:], len(shown)
        if not new and not text:
            return None
        req.sent_tokens += len(new)
        return cls(req.req_id, new, text)
