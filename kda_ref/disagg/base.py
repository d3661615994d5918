"""The interface both disaggregation modes share, and what they share: the engines' configuration, the
request check, the router, the counters and the handoff records (a leaf of ``kda_ref.disagg``: the local
and the process modes import it, it imports neither).

:class:`Disaggregation` is the one interface (``add_request``, ``step``, ``has_unfinished``, ``generate``,
``stats``, ``start``, ``close``); :class:`~kda_ref.disagg.llm.LocalDisaggregation` runs every engine in
this process, :class:`~kda_ref.disagg.dist.DistDisaggregation` each as a worker process;
:func:`~kda_ref.disagg.llm.DisaggregatedLLM` builds the one ``transfer=`` names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from ..engine import LLM, EngineConfig, RequestOutput, SamplingParams
from .router import Router

TRANSFERS = ("local", "dist")
COUNTERS = ("handoffs", "recomputed", "routed_to_decode", "kv_bytes", "state_bytes", "conv_bytes", "transfer_s",
            "early_sends", "kv_bytes_early")


class DisaggregationError(RuntimeError):
    """A decode worker failed, or the worker processes did not start or answer within the timeout."""


def prefill_params(sp: SamplingParams) -> SamplingParams:
    """What the prefill side runs: the prompt and its first token, sampled as the caller asked."""
    return SamplingParams(max_tokens=1, temperature=sp.temperature, top_k=sp.top_k, seed=sp.seed, ignore_eos=True)


def _check_sizes(timeout, num_prefill, num_decode) -> None:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout: must be a positive number of seconds, got {timeout!r}")
    for name, n in (("num_prefill", num_prefill), ("num_decode", num_decode)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{name}: must be an int >= 1, got {n!r}")


class Disaggregation(ABC):
    """Prefill engines and decode engines, the handoff between them (see :mod:`kda_ref.disagg.llm`)."""

    transfer: str = ""

    def __init__(self, model, timeout: float, num_prefill: int, num_decode: int, config: EngineConfig | None,
                 settings: dict, tracer=None, tokenizer="auto"):
        _check_sizes(timeout, num_prefill, num_decode)
        if config is not None and settings:
            raise ValueError(f"config: given with the keywords {sorted(settings)}; set them on the EngineConfig")
        self.timeout = float(timeout)
        self.engine_config = EngineConfig.from_kwargs(**settings) if config is None else config
        self.tracer, self.tokenizer = tracer, tokenizer  # the in-process engines' (LLM's arguments of that name)
        first = LLM(model, config=self.engine_config, tracer=tracer, tokenizer=tokenizer)  # every argument checked here
        self._check_engine = first  # checks every request's prompt and parameters
        # what worker processes build their engines from: a checkpoint folder each loads itself
        self.model = model if isinstance(model, (str, Path)) else first.model
        self.router = Router(num_prefill, num_decode, first.prefix_cache.enabled)
        self.counters: dict = {k: 0 for k in COUNTERS}
        self.counters.update(transfer_s=0.0, prefill_failed=False)  # prefill_failed: a worker died or hung (dist)
        self.request_bytes: dict[int, dict[str, int]] = {}  # request id -> bytes sent by kind
        self.last_error: str | None = None
        self.worker_pools_empty: dict[int, bool] = {}  # dist: rank -> its pool was empty at exit
        self.prefills: list[LLM] = []  # in-process engines (local mode)
        self.decodes: list[LLM] = []
        self._next_id = 0
        self._first = first

    # ---- the caller's surface ------------------------------------------------------------------------
    def _checked(self, prompt, params) -> tuple[list[int], SamplingParams]:
        sp = params or SamplingParams()
        if not isinstance(sp, SamplingParams):
            raise ValueError(f"params: expected SamplingParams, got {type(sp).__name__}")
        return self._check_engine.check_request(prompt, sp)[0], sp  # bad input raises here, nothing queued

    def add_request(self, prompt, params: SamplingParams | None = None) -> int:
        """Queue a request and return its id: on the decode engine whose prefix cache holds the state it
        continues (a follow-up turn), else on a prefill engine (the prompt and its first token) with a
        decode engine chosen now."""
        ids, sp = self._checked(prompt, params)
        ours = self._next_id
        self._next_id += 1
        i, j = self.router.pick(ids)
        if i is None:
            self.counters["routed_to_decode"] += 1
        self._submit(ours, prompt, ids, sp, i, j)
        return ours

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
        out_list = [outs[i] for i in ids]
        tok = self._check_engine.tokenizer
        if tok is not None:
            for o in out_list:
                o.text = tok.decode(o.token_ids)
        return out_list

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
