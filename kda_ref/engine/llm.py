"""``LLM``: the public entry point — a small continuous-batching engine for the hybrid model.

Each :meth:`step` is the article's execution chain (``docs/article.md#s1-1``): the
:class:`~kda_ref.engine.scheduler.Scheduler` schedules, the :class:`~kda_ref.engine.runner.ModelRunner` runs
one varlen forward over the :class:`~kda_ref.memory.UnifiedMemoryPool` and samples, and the scheduler's
``postprocess`` moves every request forward. ``LLM`` itself only validates requests, loops the steps and
shapes the outputs; ``add_request`` / ``step`` / ``abort`` serve streaming and the visualizer.
Design notes: ``docs/architecture.md#the-request-path``.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from tqdm import tqdm

from ..cache import make_prefix_cache
from ..memory import PageKind, UnifiedMemoryPool
from ..model.layer_state import BoundaryState
from ..model import ConfigError, HybridModel, ModelConfig, load_pretrained
from ..model.config import checkpoint_folder
from ..model.size import check_fits
from ..model.verify_record import KEEP_STATES
from ..speculative import load_draft_model, make_drafter
from ..tokenizer import MAX_BYTE_VOCAB, ByteTokenizer
from ..trace import NULL_TRACER, NullTracer, RequestAborted, RequestArrived, StepClock, Tracer
from ..trace.header import engine_header
from . import handoff, recovery
from .config import EngineConfig
from .stopping import IncrementalDetokenizer
from .request import OutputKind, Request, RequestDelta, RequestError, RequestOutput, SamplingParams
from .request_check import RequestChecker
from .runner import ModelRunner
from .scheduler import Scheduler
from .static_decode import StaticDecode
from .step_trace import dispatch_hook

DEFAULT_CHUNK = 64  # the KDA chunk of a model built here (fla's default)


def request_seed(seed: int, req_id: int) -> int:
    """The sampling seed of request ``req_id`` on an engine seeded ``seed`` (any int of the documented
    64-bit range): SplitMix64 of the two, in ``[0, 2**64)``. Mixed, not ``seed * c + req_id``: that
    overflows ``manual_seed``'s range for large seeds, and torch's CPU generator seeds its Mersenne
    Twister from the low 32 bits only, so seeds that differ only above them would sample alike."""
    z = (seed * 0x9E3779B97F4A7C15 + req_id + 1) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return z ^ (z >> 31)


def model_config_of(model) -> ModelConfig:
    """The :class:`~kda_ref.model.ModelConfig` of what ``LLM`` takes as ``model``: a built model's, a
    checkpoint folder's ``config.json`` (read, not its weights), the one given, or the tiny one for
    ``None``; anything else a ``ValueError`` naming ``model``. The disaggregation's parent calls it too."""
    if isinstance(model, HybridModel):
        return model.config
    if isinstance(model, (str, Path)):
        return ModelConfig.from_json(checkpoint_folder(model, "model"))
    mc = ModelConfig.tiny() if model is None else model
    if not isinstance(mc, ModelConfig):
        raise ValueError(f"model: expected a ModelConfig, HybridModel or checkpoint folder, got {type(model).__name__}")
    return mc


def check_model_args(model, mc: ModelConfig, config: EngineConfig) -> None:
    """What ``LLM`` checks of ``model`` (whose configuration is ``mc``) against ``config`` before it
    builds or loads anything: the chunk size, backend and device the configuration asks for, and that
    the model and the smallest pool fit this machine (:func:`~kda_ref.model.size.check_fits`), and that
    ``max_model_len`` stays within the positions the model knows (vLLM refuses a longer one too, unless
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set: ``vllm/config/model.py::_get_and_verify_max_len``)."""
    limit = config.scheduler.max_model_len
    if limit is not None and limit > mc.max_position_embeddings:
        raise ValueError(f"max_model_len: {limit} is past the model's max_position_embeddings="
                         f"{mc.max_position_embeddings} (positions it was not built for)")
    if isinstance(model, HybridModel):
        config.check_model(model.dispatcher.chunk_size, model.backend, model.lm_head.weight.device.type)
        return
    config.check_model(config.chunk_size or DEFAULT_CHUNK, config.backend or "torch")
    check_fits(mc, page_size=config.cache.pool_page_size)


def _load_model(model, cfg: EngineConfig):
    """``(HybridModel, its tokenizer or None, why not)`` from what ``LLM`` was given: a built model, a
    checkpoint folder or a ``ModelConfig`` (``None``: the tiny one), checked (:func:`check_model_args`)
    before anything is built or loaded."""
    mc = model_config_of(model)
    check_model_args(model, mc, cfg)
    if isinstance(model, HybridModel):
        return (model, *getattr(model, "tokenizer_info", (None, None)))
    backend, chunk = cfg.backend or "torch", cfg.chunk_size or DEFAULT_CHUNK
    if isinstance(model, (str, Path)):
        loaded = load_pretrained(model, backend=backend, chunk_size=chunk)
        return (loaded, *loaded.tokenizer_info)
    return HybridModel(mc, seed=cfg.seed, backend=backend, chunk_size=chunk), None, None


def _pick_tokenizer(tokenizer, model: HybridModel, auto, note: str | None):
    """``(tokenizer or None, why none)``: ``"auto"`` takes a checkpoint folder's own tokenizer, the byte
    tokenizer for a model built in-process with a byte-sized vocabulary, else none; or the object given."""
    if tokenizer != "auto":
        if tokenizer is not None and not (hasattr(tokenizer, "encode") and hasattr(tokenizer, "decode")):
            raise ValueError(f"tokenizer: needs encode() and decode(), got {type(tokenizer).__name__}")
        return tokenizer, "tokenizer=None was given"
    if auto is None and note is None:
        if model.config.vocab_size <= MAX_BYTE_VOCAB:
            auto = ByteTokenizer()
        else:
            note = (f"the model was built in-process with a {model.config.vocab_size}-token vocabulary, which is "
                    f"not this project's byte vocabulary")
    return auto, note


def _check_tracer(tracer) -> Tracer:
    """``tracer=``: a :class:`~kda_ref.trace.Tracer`, or None for none (the null tracer)."""
    tracer = NULL_TRACER if tracer is None else tracer
    if not isinstance(tracer, Tracer):
        raise ValueError(f"tracer: expected a kda_ref.trace.Tracer (e.g. TraceRecorder()) or None, got "
                         f"{type(tracer).__name__}")
    return tracer


def _build_pool(config, cache_cfg, device) -> UnifiedMemoryPool:
    """The unified pool on the model's device; a budget it refuses is named as LLM's keyword."""
    try:
        return UnifiedMemoryPool(config, cache_cfg.memory_budget_bytes, page_size=cache_cfg.pool_page_size,
                                 checkpoint_dtype=cache_cfg.checkpoint_dtype, device=device)
    except ValueError as e:  # the pool names its own argument; here it is LLM's keyword
        raise ConfigError(f"memory_budget_bytes: {str(e).removeprefix('budget_bytes: ')}") from None


class LLM:
    """The engine. ``LLM(model, **settings)`` or ``LLM(model, config=EngineConfig(...))``.

    ``model``: a :class:`~kda_ref.model.HybridModel`, a :class:`~kda_ref.model.ModelConfig` (random weights from
    ``seed``; ``None``: the tiny one) or a Kimi-Linear checkpoint folder. ``settings``: the fields of
    :class:`~kda_ref.engine.config.EngineConfig`, flat (each documented on its field) or as ``config``. ``tracer``: a
    :class:`~kda_ref.trace.TraceRecorder`; ``tokenizer``: ``"auto"``, ``None`` or an object with ``encode`` /
    ``decode``. Raises ``ValueError`` naming a bad argument, before anything is allocated. With fp32 checkpoints
    (the default), greedy outputs do not depend on the cache (bf16 / int8 checkpoints store an approximation of the
    state: ``docs/radix_cache.md#compressed-checkpoints``), speculation, static decode or context parallelism, up to
    fp32 rounding: the logits agree to ~1e-5, so a near tie (two best logits closer than that) can go either way.
    Seeded sampling with speculation also depends on the drafts, which a cache hit, a context-parallel prefill or a
    handoff can change (an MTP drafter has no hidden states for the prompt it did not run), and so can static
    decode's padded drafts: the same configuration repeats its tokens.
    """

    def __init__(self, model: ModelConfig | HybridModel | str | Path | None = None, *, config: EngineConfig | None = None,
                 tracer=None, tokenizer="auto", **settings):
        cfg = EngineConfig.resolve(config, settings)
        self.engine_config, spec = cfg, cfg.speculative
        self.model, auto_tok, note = _load_model(model, cfg)
        self.tokenizer, self.tokenizer_note = _pick_tokenizer(tokenizer, self.model, auto_tok, note)
        # the draft model (its vocabulary checked against the target's) before any pool or cache is built
        draft = (load_draft_model(spec.draft_model, self.model.config.vocab_size)
                 if spec is not None and spec.draft_model is not None else None)
        self.model.eval()
        self.config, self.chunk_size, self.seed, self.spec = self.model.config, self.model.dispatcher.chunk_size, \
            cfg.seed, spec
        self.max_model_len = cfg.scheduler.max_model_len or self.config.max_position_embeddings
        drafter = self._build_drafter(spec, draft)
        self.tracer = _check_tracer(tracer)
        self.clock = StepClock()  # advanced by the scheduler; read by the cache and the trace hooks
        self.pool = _build_pool(self.config, cfg.cache, device=self.model.lm_head.weight.device)
        self.cache_options = cfg.cache.prefix_cache
        self.prefix_cache = make_prefix_cache(self.cache_options, self.pool, chunk_size=self.chunk_size,
                                              tracer=self.tracer, clock=self.clock)
        self.runner = self._build_runner(drafter)
        par = cfg.parallel
        self.scheduler = Scheduler(self.pool, self.prefix_cache, cfg.scheduler, eos_token_ids=self.config.eos_token_ids,
                                   tracer=self.tracer, clock=self.clock, spec=spec, drafter=drafter,
                                   pad_drafts=cfg.static.enabled and spec is not None,
                                   cp_min_tokens=par.cp_min_tokens if par.context_parallel_size > 1 else None,
                                   max_model_len=self.max_model_len)
        self._check_one_request_fits()
        self.checker = RequestChecker(self.config, self.max_model_len, self.tokenizer, self.tokenizer_note,
                                      demand=self.scheduler.demand, budget_bytes=self.pool.budget_bytes,
                                      speculative=spec is not None, context_parallel=par.context_parallel_size > 1)
        self.tracer.describe(engine_header(self))  # the trace's header: the layer layout, the pool's sizes
        self._requests: dict[int, Request] = {}  # queued, running, or finished and not yet delivered
        self._undelivered: dict[int, RequestOutput] = {}  # finished in a step driven for other requests
        self._next_id = 0
        self._prompt_tokens = 0

    def _build_drafter(self, spec, draft):
        """The drafter (an MTP drafter checks the model has an MTP layer), before any pool is built; its
        draft steps compiled as the target's are (``torch_compile``). Called once by ``__init__``."""
        if spec is None:
            return None
        drafter = make_drafter(spec, draft, max_tokens=self.max_model_len + spec.num_speculative_tokens,
                               target=self.model)
        if self.engine_config.static.torch_compile:
            drafter.compile_steps(gemm=self.engine_config.static.compile_gemm)
        return drafter

    def _build_runner(self, drafter) -> ModelRunner:
        """The model runner: the fixed-shape decode when ``static`` is on, the trace's dispatch hook, what a
        verify keeps, the context-parallel ranks. Called once by ``__init__`` after the pool is built."""
        cfg, spec = self.engine_config, self.spec
        keep_hidden = drafter is not None and drafter.needs_hidden
        static = (StaticDecode(self.model, self.pool.tensors, cfg.scheduler.max_num_seqs, self.max_model_len,
                               compile=cfg.static.torch_compile, gemm=cfg.static.compile_gemm,
                               keep_hidden=keep_hidden)
                  if cfg.static.enabled else None)
        hook = None if isinstance(self.tracer, NullTracer) else dispatch_hook(self.tracer, self.clock)  # may resume
        par = cfg.parallel
        cp = (None if par.context_parallel_size == 1 else
              {"world_size": par.context_parallel_size, "backend": par.cp_backend, "timeout": par.cp_timeout})
        return ModelRunner(self.model, self.pool, on_dispatch=hook, mixed_batch=cfg.scheduler.mixed_batch,
                           record=spec.rollback.record if spec else KEEP_STATES, static=static, cp=cp,
                           keep_hidden=keep_hidden)

    def _check_one_request_fits(self) -> None:
        """The progress guarantee's first rule at build time: a budget that cannot hold a request of one
        prompt token and one output token (its slots, the cache's pinned checkpoints, its KV pages) is
        refused before any request is queued (``docs/architecture.md#progress``)."""
        smallest = self.scheduler.demand(2)
        if smallest.bytes > self.pool.budget_bytes:
            raise ConfigError(f"memory_budget_bytes: {self.pool.budget_bytes} B cannot hold even one request of one "
                              f"prompt token and one output token, which needs {smallest.describe()}")

    # ---- requests ------------------------------------------------------------------------------
    def check_request(self, prompt, params) -> tuple[list[int], str | None, SamplingParams]:
        """Everything :meth:`add_request` checks, with nothing queued or allocated: ``(token ids, the text
        or None, the sampling parameters)``, or a :class:`RequestError` naming the argument
        (:class:`~kda_ref.engine.request_check.RequestChecker`: the prompt, its length, its peak against
        the memory budget). A disaggregated front end in one process checks each request with it before
        routing (:class:`kda_ref.disagg.DisaggregatedLLM`)."""
        return self.checker.check_request(prompt, params)

    def enqueue(self, ids: list[int], text: str | None, params: SamplingParams) -> int:
        """Queue a request that :meth:`check_request` passed; returns its id. Disaggregation queues a
        received prompt with it (to be prefilled here when its handoff is refused)."""
        req_id = self._next_id
        self._next_id += 1
        gen = None
        if params.temperature > 0:
            gen = torch.Generator().manual_seed(params.seed if params.seed is not None else request_seed(self.seed, req_id))
        detok = IncrementalDetokenizer(self.tokenizer, params.stop) if self.tokenizer is not None else None
        req = Request(req_id, ids, params=params, prompt_text=text, generator=gen, detok=detok)
        self._requests[req_id] = req
        self.scheduler.add(req)
        self._prompt_tokens += len(ids)
        if self.tracer.enabled:
            self.tracer.emit(RequestArrived(step=self.clock.step, req_id=req_id, prompt_len=len(ids),
                                            max_tokens=params.max_tokens))
        return req_id

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None) -> int:
        """Queue a request; returns its id. Bad input raises :class:`RequestError` and queues nothing."""
        return self.enqueue(*self.check_request(prompt, params))

    def request(self, req_id: int) -> Request | None:
        """The request ``req_id`` of this engine while it is queued, running, or finished and not yet
        delivered: its tokens, slot and pages. ``None`` once its output was delivered (by :meth:`step`
        or :meth:`generate`) or it was aborted: the engine keeps nothing of a request after that."""
        return self._requests.get(req_id)

    def add_finish_listener(self, listener) -> None:
        """Call ``listener(request)`` when a request finishes normally, while it still holds its slot and
        pages (before the prefix cache takes its state and its memory is freed): a disaggregated prefill
        captures the handoff there."""
        self.scheduler.add_finish_listener(listener)

    def has_room_for(self, boundary: int, evict: bool) -> bool:
        """Whether a request installed with ``boundary`` cached tokens would get a seat (``max_num_seqs``),
        its state slots and its KV pages now (``evict``: evicting unlocked cache entries for them first)."""
        return handoff.has_room_for(self.scheduler, boundary, evict)

    def admit_prefilled(self, req_id: int, state: BoundaryState, first_token: int,
                        sampler_state: bytes | None = None) -> None:
        """Run request ``req_id`` (queued, not yet admitted) from a state computed elsewhere: ``state`` is
        its KDA states, conv windows and KV rows after its whole prompt (``boundary`` tokens), and
        ``first_token`` the token sampled after it. Slots and pages are taken here and the state installed
        through the pool's one boundary writer; the request then decodes like any other. Raises
        :class:`~kda_ref.memory.PoolExhausted` (nothing held) when there is no room. The decode side of
        prefill/decode disaggregation calls it (SGLang: the decode instance's prealloc + transfer).
        ``sampler_state``: the prefill side's generator state after it drew ``first_token``
        (``torch.Generator.get_state`` as bytes), so a seeded request samples as on one engine."""
        req = self._requests.get(req_id)
        if req is None:
            raise RequestError(f"req_id: no request {req_id!r} on this engine")
        handoff.admit_prefilled(self.scheduler, req, state, first_token, sampler_state)

    def abort(self, req_id: int) -> bool:
        """Stop a request and free what it holds; False if it is unknown or already finished. ``req_id`` must be an
        int (``abort(True)`` stopped request 1: ``True == 1``)."""
        if isinstance(req_id, bool) or not isinstance(req_id, int):
            raise TypeError(f"req_id: must be an int request id, got {type(req_id).__name__} {req_id!r:.40}")
        req = self.scheduler.abort(req_id)
        if req is None:
            return False
        self._requests.pop(req_id, None)  # the caller knows: step() does not deliver it
        req.finish_time = time.perf_counter()
        if self.tracer.enabled:
            self.tracer.emit(RequestAborted(step=self.clock.step, req_id=req_id))
        return True

    def has_unfinished(self) -> bool:
        """Whether :meth:`step` has anything left to do or to deliver (a request queued or running, or one
        that finished in a :meth:`generate` call for other requests and waits for its :meth:`step`)."""
        return self.scheduler.has_unfinished() or bool(self._undelivered)

    @property
    def num_running(self) -> int:
        """Requests admitted and not finished (a waiting handoff waits while some run)."""
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        """Requests queued and not running (new, or preempted): what a server's admission bound counts."""
        return len(self.scheduler.waiting)

    # ---- the loop ------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput | RequestDelta]:
        """One engine step -- schedule, one forward and sampling, postprocess (the scheduler owns the
        first and the last). Returns a :class:`RequestDelta` for every running request that gained tokens
        and asked for them (``SamplingParams.output_kind``), then every finished request not delivered
        yet: those of this step, and those of :meth:`add_request` that finished in a step :meth:`generate`
        drove for its own prompts (``o.finished`` tells the two apart). Each finished request is delivered
        exactly once, by whichever call returns it, and then forgotten (:meth:`request` gives ``None``);
        an aborted one is not delivered. The server's loop (:class:`kda_ref.server.loop.EngineLoop`) reads
        only these: it never asks the engine about a request (vLLM's ``EngineCore.step`` returns
        ``EngineCoreOutputs`` the same way)."""
        done, ran = self._step()
        outs = list(self._undelivered.values()) + done
        self._undelivered.clear()
        for o in outs:
            self._requests.pop(o.req_id, None)
        deltas = []
        for it in ran:  # a loop, not a comprehension: a plain offline step makes no call here
            req = it.req
            if req.params.output_kind is not OutputKind.FINAL_ONLY and req.finish_reason is None:
                delta = RequestDelta.take(req)
                if delta is not None:
                    deltas.append(delta)
        return deltas + outs

    def _step(self) -> tuple[list[RequestOutput], list]:
        """One step: the outputs of the requests that finished in it (not yet delivered), and the items it
        ran (``ScheduledItem``: each holds its request)."""
        sched = self.scheduler.schedule()
        # no memory even alone, or a stall (the comprehension only then: a plain step makes no call here)
        done = [] if not sched.refused else [self._output(req) for req in sched.refused]
        if not sched.items:
            return done, []
        try:
            out = self.runner.run(sched, return_chunk_states=self.prefix_cache.needs_chunk_states)
        except Exception as err:  # noqa: BLE001 -- the scheduler recovers (recompute, isolate the culprit)
            out, finished = None, recovery.forward_failed(self.scheduler, sched, err)
        if out is not None:
            finished = self.scheduler.postprocess(sched, out)
        for req in finished:
            done.append(self._output(req))
        return done, sched.items

    def _output(self, req: Request) -> RequestOutput:
        """A finished request's output; its text is its detokenizer's (the one the stop strings were found
        in), whatever the prompt was given as (None without a tokenizer), as vLLM detokenizes by default."""
        return RequestOutput.from_request(req, req.detok.finish() if req.detok is not None else None)

    def generate(self, prompts, params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool = False) -> list[RequestOutput]:
        """Run ``prompts`` (strings or token-id lists) to completion; outputs in prompt order."""
        if isinstance(prompts, (str, torch.Tensor)) or (isinstance(prompts, (list, tuple)) and prompts
                                                         and isinstance(prompts[0], int)):
            prompts = [prompts]
        if not isinstance(prompts, (list, tuple)):
            raise RequestError(f"prompts: must be a str, a list of token ids, or a list of those, got "
                               f"{type(prompts).__name__}")
        plist = params if isinstance(params, list) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise RequestError(f"params: {len(plist)} SamplingParams for {len(prompts)} prompts")
        checked = []
        for k, (p, sp) in enumerate(zip(prompts, plist)):  # every prompt first: on an error nothing is queued
            try:
                checked.append(self.check_request(p, sp))
            except RequestError as e:
                raise RequestError(f"prompts[{k}]: {e}") from None
        ids = [self.enqueue(*c) for c in checked]
        mine = {i: self._requests[i] for i in ids}
        done: dict[int, RequestOutput] = {}
        bar = tqdm(total=len(ids), desc="generate", unit="req", disable=not use_tqdm)
        while mine.keys() - done.keys() and self.scheduler.has_unfinished():
            for out in self._step()[0]:
                if out.req_id in mine:
                    done[out.req_id] = out
                    bar.update(1)
                else:  # another caller's request: delivered by the next step()
                    self._undelivered[out.req_id] = out
        bar.close()
        for i, req in mine.items():
            self._requests.pop(i, None)
            if i not in done:  # aborted while generating
                done[i] = self._output(req)
        return [done[i] for i in ids]

    def flush_cache(self) -> None:
        """Drop every unlocked prefix-cache entry (checkpoints and KV); a no-op without a cache."""
        self.prefix_cache.flush()

    def stats(self) -> dict:
        s = {"prompt_tokens": self._prompt_tokens, **self.scheduler.counters}
        if self.prefix_cache.enabled:
            s.update(self.prefix_cache.stats)
            s.update(self.prefix_cache.occupancy())
            s["checkpoint_bytes"] = self.pool.used_bytes[PageKind.CHECKPOINT]
        if self.runner.cp is not None:
            s.update(self.runner.cp_counters)
        s["preemptions"] = self.scheduler.num_preemptions
        s["forward_failures"] = self.scheduler.num_forward_failures
        s["peak_pool_bytes"] = {k.value: v for k, v in self.pool.peak_bytes.items()}
        s["peak_pool_bytes"]["total"] = self.pool.peak_total_bytes
        s["pool_used_bytes"] = {k.value: v for k, v in self.pool.used_bytes.items()}
        s["budget_bytes"] = self.pool.budget_bytes
        return s
