"""``DisaggregatedLLM``: the entry point of prefill/decode disaggregation, the interface both modes
share, and what they share: the engines' configuration, the request check, the router, the counters and
the handoff records (a leaf of ``kda_ref.disagg``: the local and the process modes import it, it
imports neither; each registers itself by its ``transfer`` name when its module is imported).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import ClassVar

from ..engine import EngineConfig, RequestError, RequestOutput, SamplingParams
from ..engine.request import OutputKind
from ..engine.stopping import token_stop_reason
from ..utils.limits import MAX_WORLD_SIZE
from .router import Router

COUNTERS = ("handoffs", "recomputed", "routed_to_decode", "kv_bytes", "state_bytes", "conv_bytes", "transfer_s",
            "early_sends", "kv_bytes_early")


class DisaggregationError(RuntimeError):
    """A decode worker failed, or the worker processes did not start or answer within the timeout."""


def prefill_params(sp: SamplingParams) -> SamplingParams:
    """What the prefill side runs: the prompt and its first token, sampled as the caller asked (temperature,
    filters, penalties, seed) and checked against the caller's stop strings; one token, whatever the token
    (:func:`first_token_reason` applies the caller's token rules). Until 2026-12-07 only temperature, top-k
    and seed were passed: greedy answers with penalties differed from the single engine's."""
    return replace(sp, max_tokens=1, ignore_eos=True, return_logits=False, output_kind=OutputKind.FINAL_ONLY)


def first_token_reason(sp: SamplingParams, prefill_reason: str | None, token: int, eos: tuple[int, ...]) -> str | None:
    """Why the first token ends a disaggregated request under the caller's ``sp``, or None (it goes on to a
    decode engine): ``"stop"`` when the prefill engine stopped on it (``prefill_reason``: a stop string its
    text completed, or a stop token), a stop token or an EOS the caller does not ignore; ``"length"`` at
    ``max_tokens=1``. Both modes ask it when a prefill finishes."""
    if prefill_reason == "stop":
        return "stop"
    return token_stop_reason(sp, token, eos, 1)


MAX_TIMEOUT_S = 3600.0


def _check_sizes(timeout, num_prefill, num_decode) -> None:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S \
            or not math.isfinite(timeout):
        raise ValueError(f"timeout: must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {timeout!r}")
    for name, n in (("num_prefill", num_prefill), ("num_decode", num_decode)):
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n < MAX_WORLD_SIZE:
            raise ValueError(f"{name}: must be an int in [1, {MAX_WORLD_SIZE - 1}], got {n!r}")
    if num_prefill + num_decode > MAX_WORLD_SIZE:  # one engine (a process in "dist") each
        raise ValueError(f"num_prefill / num_decode: at most {MAX_WORLD_SIZE} engines in all, got "
                         f"{num_prefill} + {num_decode}")


class DisaggregatedLLM(ABC):
    """Prefill/decode disaggregation of a KDA + MLA hybrid: prefill engines run the prompts, decode
    engines generate, and the handoff carries the MLA KV of every prompt token, each KDA layer's
    recurrent state and conv window -- all at the one prompt boundary -- and the first token
    (article concept ``pd.state_transfer``, ``docs/disaggregation.md``). ``transfer`` names the mode,
    the subclass this builds: ``"local"`` (:class:`~kda_ref.disagg.llm.LocalDisaggregation`) or
    ``"dist"`` (:class:`~kda_ref.disagg.dist.DistDisaggregation`).

    ``model``, the engines' settings (flat, or one :class:`~kda_ref.EngineConfig` as ``config``, the
    same for every engine), ``tracer`` (in-process engines only) and ``tokenizer`` as :class:`~kda_ref.LLM`
    takes them; ``timeout``: the seconds a receive waits. A bad argument raises ``ValueError`` naming it.
    Surface: :meth:`add_request`, :meth:`step`, :meth:`has_unfinished`, :meth:`generate`, :meth:`stats`,
    :meth:`start`, :meth:`close`, a context manager, :attr:`counters`, :attr:`request_bytes`,
    :attr:`last_error`, :attr:`router`. A new mode is a subclass with a new ``transfer`` name that sets
    :attr:`checker` and implements :meth:`_submit`, :meth:`step` and :meth:`has_unfinished` (and
    :meth:`start` / :meth:`close` if it holds processes).
    Design notes: ``docs/disaggregation.md#the-entry-point-disaggregatedllm``.
    """

    transfer: ClassVar[str] = ""  # the mode's name; "" on the entry point itself
    modes: ClassVar[dict[str, type]] = {}  # transfer name -> the subclass that runs it

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        name = cls.__dict__.get("transfer")
        if not name:
            return  # a subclass of a mode (or an abstract one): not a mode of its own
        known = DisaggregatedLLM.modes.get(name)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise TypeError(f"transfer: {name!r} is already the mode of {known.__module__}.{known.__qualname__}")
        DisaggregatedLLM.modes[name] = cls

    def __new__(cls, model=None, transfer: str | None = None, *args, **kwargs):
        if cls is DisaggregatedLLM:  # the entry point: the mode transfer names ("local" by default)
            name = "local" if transfer is None else transfer
            mode = DisaggregatedLLM.modes.get(name) if isinstance(name, str) else None
            if mode is None:
                raise ValueError(f"transfer: must be one of {tuple(sorted(DisaggregatedLLM.modes))}, got {transfer!r}")
            return super().__new__(mode)
        if not cls.transfer:
            raise TypeError(f"{cls.__name__}: not a mode (set `transfer` on it, or subclass a mode such as "
                            f"LocalDisaggregation)")
        if transfer is not None and transfer != cls.transfer:
            raise ValueError(f"transfer: {cls.__name__} is the {cls.transfer!r} mode, got {transfer!r}")
        return super().__new__(cls)

    def __init__(self, model=None, transfer: str | None = None, timeout: float = 60.0, num_prefill: int = 1,
                 num_decode: int = 1, config: EngineConfig | None = None, tracer=None, tokenizer="auto",
                 **settings):
        _check_sizes(timeout, num_prefill, num_decode)
        self.engine_config = EngineConfig.resolve(config, settings)
        self.timeout = float(timeout)
        self.num_prefill, self.num_decode = num_prefill, num_decode
        self.model = model  # what the engines are built from (a mode may keep the built model instead)
        self.tracer, self.tokenizer = tracer, tokenizer  # LLM's arguments of that name, as given
        # what checks each request before it is routed: ``check_request(prompt, params)`` and ``tokenizer``
        # (an LLM in process, a RequestChecker where the engines live elsewhere); set by the mode
        self.checker = None
        self.router = self.new_router()
        self.counters: dict = {k: 0 for k in COUNTERS}
        self.counters.update(transfer_s=0.0, prefill_failed=False)  # prefill_failed: a worker died or hung (dist)
        self.request_bytes: dict[int, dict[str, int]] = {}  # request id -> bytes sent by kind
        self.last_error: str | None = None
        self.worker_pools_empty: dict[int, bool] = {}  # dist: rank -> its pool was empty at exit
        self.prefills: list = []  # in-process engines (local mode)
        self.decodes: list = []
        self._next_id = 0

    # ---- the caller's surface ------------------------------------------------------------------------
    def _checked(self, prompt, params) -> tuple[list[int], SamplingParams]:
        sp = params or SamplingParams()
        if not isinstance(sp, SamplingParams):
            raise ValueError(f"params: expected SamplingParams, got {type(sp).__name__}")
        ids = self.checker.check_request(prompt, sp)[0]  # bad input raises here, nothing queued
        if sp.output_kind is not OutputKind.FINAL_ONLY:
            raise RequestError(f"output_kind: a disaggregated request is returned whole (FINAL_ONLY), got "
                               f"{sp.output_kind.name}")
        for name in ("logprobs", "prompt_logprobs"):  # the first token's and the prompt's stay on the prefill side
            if getattr(sp, name) is not None:
                raise RequestError(f"{name}: not carried across a prefill/decode handoff; run the single engine")
        return ids, sp

    def add_request(self, prompt, params: SamplingParams | None = None) -> int:
        """Queue a request and return its id: on the decode engine whose prefix cache holds the state it
        continues (a follow-up turn), else on a prefill engine (the prompt and its first token) with a
        decode engine chosen now."""
        ids, sp = self._checked(prompt, params)
        ours = self._next_id
        self._next_id += 1
        i, j = self.router.pick(ids)
        try:
            self._submit(ours, prompt, ids, sp, i, j)
        except BaseException:
            self.router.unpick(i, j)  # it never reached them: the loads stay the requests they hold
            raise
        if i is None:
            self.counters["routed_to_decode"] += 1
        return ours

    def new_router(self) -> Router:
        """A router for a fresh set of instances: every prefill instance alive, no load, no state held. The
        process mode takes a new one whenever its workers stop (a failure, :meth:`close`): the next request
        starts fresh workers, and the old router's dead instances and held states no longer exist."""
        return Router(self.num_prefill, self.num_decode, self.engine_config.cache.prefix_cache is not None)

    @abstractmethod
    def _submit(self, ours: int, prompt, ids: list[int], sp: SamplingParams, i: int | None, j: int) -> None:
        """Hand request ``ours`` to prefill engine ``i`` with decode engine ``j`` (``i=None``: to ``j``)."""

    @abstractmethod
    def has_unfinished(self) -> bool:
        """Whether any request is still queued, running or between its engines."""

    @abstractmethod
    def step(self) -> list[RequestOutput]:
        """One round of work; the requests that finished (ids from :meth:`add_request`)."""

    def generate(self, prompts, params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        """Every prompt prefilled on a prefill engine, handed off, decoded on a decode engine (or, for a
        follow-up turn, served by the decode engine holding its state)."""
        prompts = list(prompts)
        plist = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"params: {len(plist)} for {len(prompts)} prompts")
        for p, sp in zip(prompts, plist):
            self._checked(p, sp)  # every prompt checked before any is queued
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, plist)]
        outs = {}
        while self.has_unfinished():
            for o in self.step():
                outs[o.req_id] = o
        return [outs[i] for i in ids]

    def stats(self) -> dict:
        """Handoffs, recomputes, bytes by kind (KV / state / conv) in total and per request, KV sent
        before the boundary was final, transfer time, and each in-process engine's own stats."""
        return {**self.counters, "bytes_per_request": dict(self.request_bytes),
                "prefill": [e.stats() for e in self.prefills], "decode": [e.stats() for e in self.decodes]}

    def start(self) -> None:
        """Start the worker processes now rather than at the first request (process mode)."""

    def close(self) -> None:
        """Stop the worker processes (process mode); nothing to do in process."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def record_handoff(self, ours: int, ok: bool, info: dict) -> None:
        """A decode engine installed (``ok``) or refused request ``ours``'s handoff."""
        self.counters["transfer_s"] += info.get("transfer_s", 0.0)
        self.counters["early_sends"] += info.get("early_sends", 0)
        self.counters["kv_bytes_early"] += info.get("kv_bytes_early", 0)
        if not ok:
            self.last_error = info.get("error")
            self.counters["recomputed"] += 1
            return
        self.counters["handoffs"] += 1
        self.request_bytes[ours] = dict(info["bytes"])
        for kind, n in info["bytes"].items():
            self.counters[f"{kind}_bytes"] += n


Disaggregation = DisaggregatedLLM  # the interface's former name
