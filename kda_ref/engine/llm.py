"""``LLM``: the public entry point — a small continuous-batching engine for the hybrid model.

    from kda_ref import LLM, SamplingParams, ModelConfig
    llm = LLM(ModelConfig.tiny(), seed=0)
    outs = llm.generate(["Hello", "你好"], SamplingParams(max_tokens=16))

The loop per :meth:`step` (the article's execution chain, ``docs/article.md#s1-1``): the
:class:`~kda_ref.engine.scheduler.Scheduler` picks decode tokens and prefill chunks under the
token budget, the :class:`~kda_ref.engine.runner.ModelRunner` runs them as one varlen forward over
the :class:`~kda_ref.memory.UnifiedMemoryPool` and samples, and the scheduler's ``postprocess``
moves every request forward (finished requests give their slot and pages back). ``LLM`` itself only
validates requests, loops the steps and shapes the outputs. Step-level driving (``add_request`` /
``step`` / ``abort``) is what streaming and the visualizer use.

Who owns what: the scheduler owns the step (its clock, the pool's admission, the prefix cache's
whole lifecycle); the runner owns the forward; the model owns no memory and no tracing (the trace
hook travels with each forward call).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from tqdm import tqdm

from ..cache import CacheOptions, cache_options, make_prefix_cache, pool_page_size
from ..cache.options import CACHE_OPTION_NAMES
from ..memory import PageKind, UnifiedMemoryPool
from ..model import HybridModel, ModelConfig, load_pretrained
from ..model.batch import MIXED_BATCH_POLICIES
from ..model.size import check_fits
from ..spec import DraftModelDrafter, SpecConfig, load_draft_model
from ..spec.config import spec_config
from ..tokenizer import MAX_BYTE_VOCAB, ByteTokenizer
from ..utils import machine_memory_bytes
from ..trace import NULL_TRACER, RequestAborted, RequestArrived, StepClock
from .request import Request, RequestError, RequestOutput, SamplingParams
from .runner import ModelRunner
from .scheduler import Scheduler
from .static_decode import StaticDecode, cpp_compiler
from .step_trace import dispatch_hook


# what a verify forward keeps, by spec_state: per-token states (per_step), inputs (ReplaySSM), or states
# written into the request's slots by the step (slots)
VERIFY_KEEP_OF = {"per_step": "states", "replay": "trajectory", "slots": "slots"}
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed accepts


def _int_arg(name: str, val, minimum: int = 1) -> int:
    if isinstance(val, bool) or not isinstance(val, int) or val < minimum:
        raise ValueError(f"{name}: must be an int >= {minimum}, got {val!r}")
    return val


def _check_keywords(extra: dict) -> None:
    """``LLM``'s ``**cache_kwargs`` must be option names of a prefix cache: anything else is a typo,
    named with the nearest real argument."""
    import difflib
    import inspect

    known = [p for p in inspect.signature(LLM.__init__).parameters if p not in ("self", "cache_kwargs")]
    options = sorted({n for names in CACHE_OPTION_NAMES.values() for n in names})
    for name in extra:
        if name not in options:
            near = difflib.get_close_matches(name, known + options, n=1, cutoff=0.5)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ValueError(f"{name}: not an argument of LLM (nor an option of a prefix cache){hint}")


def _load_model(model, seed: int, backend: str, chunk_size: int | None, page_size: int):
    """``(HybridModel, its tokenizer or None, why not)`` from what ``LLM`` was given: a built model, a
    checkpoint folder or a ``ModelConfig`` (``None``: the tiny one). A folder's or a config's size is
    checked from its numbers first, the smallest pool included (:func:`~kda_ref.model.size.check_fits`)."""
    if isinstance(model, HybridModel):
        if chunk_size is not None and chunk_size != model.dispatcher.chunk_size:
            raise ValueError(f"chunk_size: {chunk_size} contradicts the given model's chunk size "
                             f"{model.dispatcher.chunk_size}")
        return (model, *getattr(model, "tokenizer_info", (None, None)))
    if isinstance(model, (str, Path)):
        check_fits(ModelConfig.from_json(model), page_size=page_size)
        loaded = load_pretrained(model, backend=backend, chunk_size=chunk_size or 64)
        return (loaded, *loaded.tokenizer_info)
    cfg = ModelConfig.tiny() if model is None else model
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"model: expected a ModelConfig, HybridModel or checkpoint folder, got {type(model).__name__}")
    check_fits(cfg, page_size=page_size)
    return HybridModel(cfg, seed=seed, backend=backend, chunk_size=chunk_size or 64), None, None


class LLM:
    def __init__(
        self,
        model: ModelConfig | HybridModel | str | Path | None = None,
        seed: int = 0,
        backend: str = "torch",
        max_num_seqs: int = 16,
        max_num_batched_tokens: int = 512,
        memory_budget_bytes: int = 64 << 20,
        page_size: int | None = None,
        prefix_cache: str | CacheOptions = "none",
        tracer=None,
        chunk_size: int | None = None,
        max_model_len: int | None = None,
        checkpoint_dtype: str = "fp32",
        tokenizer="auto",
        mixed_batch: str = "chunk",
        speculative: str | SpecConfig | None = None,
        num_speculative_tokens: int | None = None,
        spec_state: str | None = None,
        spec_tree_width: int | None = None,
        prompt_lookup_min: int | None = None,
        prompt_lookup_max: int | None = None,
        draft_model=None,
        static_decode: bool = False,
        torch_compile: bool = False,
        context_parallel_size: int = 1,
        cp_min_tokens: int = 4096,
        cp_backend: str = "gloo",
        cp_timeout: float = 120.0,
        **cache_kwargs,
    ):
        """``prefix_cache``: ``"none"``, ``"radix"`` (SGLang-style KDA-aware radix tree), ``"block"``
        (vLLM-style hashed state blocks), or an option object
        (:class:`~kda_ref.cache.RadixCacheOptions` / :class:`~kda_ref.cache.BlockCacheOptions`).
        The cache's options may also be given as flat keywords (``checkpoint_policy=...``,
        ``block_size=..., retention_interval=..., eviction=...``); the option classes list them with
        their defaults. ``checkpoint_dtype`` fp32 | bf16 | int8 applies to both caches.

        ``chunk_size``: the KDA chunk (a power of two; 64 by default, as fla); a given ``HybridModel``
        brings its own, which a different explicit value contradicts. ``tokenizer``: ``"auto"`` (a
        checkpoint folder's own tokenizer when it can be used without running code from the folder;
        the byte tokenizer for a model built in-process with a byte-sized vocabulary; else none:
        prompts must be token ids), ``None``, or an object with ``encode`` / ``decode``.

        ``mixed_batch``: how a step that mixes decodes and prefill chunks runs the KDA layers --
        ``"chunk"`` (SGLang's and vLLM's way: one chunk-kernel call over the whole varlen batch) or
        ``"split"`` (decodes through the recurrent kernel, chunks through the chunk kernel); see
        :class:`~kda_ref.model.batch.ForwardBatch`. The outputs are the same.

        ``speculative``: ``None`` (off), ``"ngram"`` (prompt-lookup drafts, no draft model) or
        ``"draft"`` (``draft_model``: a small ``HybridModel``, ``ModelConfig`` or checkpoint folder with
        the target's vocabulary, drafting greedily with its own rolled-back states), with
        ``num_speculative_tokens`` (k, default 3) and ``spec_state`` (how the KDA state survives a
        rejection: ``"per_step"`` copies the kept state, ``"slots"`` gives each request 1 + k state slots,
        ``"replay"`` keeps only the tokens' inputs and recomputes the kept state, ReplaySSM);
        ``spec_tree_width`` (``"ngram"`` and ``"per_step"`` only): draft a tree of up to that many
        continuations, each node verified from its parent's state (:mod:`kda_ref.spec.tree`);
        ``prompt_lookup_min`` / ``prompt_lookup_max`` (``"ngram"``, default 1 / 4): the shortest and
        longest suffix the drafter looks up (vLLM's ``speculative_config`` keys of the same names);
        or a :class:`~kda_ref.spec.SpecConfig`. Outputs are those of
        plain decoding: greedy tokens for temperature 0, the target's distribution otherwise.

        ``static_decode``: run all-decode steps over fixed, preallocated metadata per batch-size bucket,
        with PAD rows (index -1) that read nothing live and write nothing
        (:mod:`kda_ref.engine.static_decode`); on CUDA each bucket's step is captured once as a CUDA
        graph and replayed; with speculation, verify steps whose rows all verify ``1 + k`` tokens too (a
        short draft is then padded with its last token, which is kept only where the target agrees).
        Needs ``backend="torch"``. Tokens and logits are those of dynamic decoding.
        ``torch_compile`` (with ``static_decode``; SGLang's ``--enable-torch-compile``): each bucket's
        step is compiled by ``torch.compile`` (inductor) at its second use -- tens of seconds per bucket
        on a small CPU, announced on the ``kda_ref`` logger -- and runs compiled after that (a bucket
        whose compilation fails runs eagerly, with a warning). Inductor needs a C++ compiler on the
        CPU (``$CXX``, else ``g++``); without one this is refused. Tokens equal dynamic decoding's,
        logits within float rounding (the compiled kernels sum in their own order).

        ``context_parallel_size``: with ``R > 1``, a prompt of at least ``cp_min_tokens`` tokens is
        prefilled in a step of its own by ``R`` ranks (:func:`kda_ref.parallel.context_parallel_prefill`,
        ``cp_backend`` ``"gloo"`` processes or ``"threads"``; a rank silent for ``cp_timeout`` seconds is
        an error): their final states and KV land in the request's slot and pages and decoding continues
        here. If the ranks fail, the engine prefills the prompt itself. Tokens are those without it.

        Every argument is checked before anything is allocated; a bad one raises ``ValueError``
        naming it."""
        _check_keywords(cache_kwargs)
        options = cache_options(prefix_cache, **cache_kwargs)
        spec = spec_config(speculative, num_speculative_tokens, spec_state, draft_model=draft_model,
                           tree_width=spec_tree_width, prompt_lookup_min=prompt_lookup_min,
                           prompt_lookup_max=prompt_lookup_max)
        page_size = pool_page_size(options, page_size)
        _int_arg("context_parallel_size", context_parallel_size)
        _int_arg("cp_min_tokens", cp_min_tokens)
        if cp_backend not in ("gloo", "nccl", "threads"):
            raise ValueError(f"cp_backend: must be 'gloo', 'nccl' or 'threads', got {cp_backend!r}")
        if isinstance(cp_timeout, bool) or not isinstance(cp_timeout, (int, float)) or not cp_timeout > 0:
            raise ValueError(f"cp_timeout: must be a positive number of seconds, got {cp_timeout!r}")
        if not isinstance(static_decode, bool):
            raise ValueError(f"static_decode: must be True or False, got {static_decode!r}")
        if not isinstance(torch_compile, bool):
            raise ValueError(f"torch_compile: must be True or False, got {torch_compile!r}")
        if torch_compile and not static_decode:
            raise ValueError("torch_compile: compiles the fixed-shape steps of static_decode=True; "
                             "pass static_decode=True with it")
        if torch_compile and cpp_compiler() is None:
            raise ValueError("torch_compile: torch.compile (inductor) needs a C++ compiler on the CPU and the one "
                             "it would call ($CXX, else g++) was not found; install one or leave torch_compile off")
        run_backend = model.backend if isinstance(model, HybridModel) else backend
        if static_decode and run_backend != "torch":
            raise ValueError(f"static_decode: needs backend='torch' (the Triton kernels check their slots on the "
                             f"host, which a captured step cannot), got backend={run_backend!r}")
        if mixed_batch not in MIXED_BATCH_POLICIES:
            raise ValueError(f"mixed_batch: must be one of {MIXED_BATCH_POLICIES}, got {mixed_batch!r}")
        _int_arg("max_num_seqs", max_num_seqs)
        _int_arg("max_num_batched_tokens", max_num_batched_tokens)
        _int_arg("memory_budget_bytes", memory_budget_bytes)
        machine = machine_memory_bytes()
        if machine is not None and memory_budget_bytes > machine:
            raise ValueError(f"memory_budget_bytes: {memory_budget_bytes} B is more than this machine's memory "
                             f"({machine} B)")
        if isinstance(seed, bool) or not isinstance(seed, int) or not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
            raise ValueError(f"seed: must be an int in the 64-bit range, got {seed!r}")
        if max_model_len is not None:
            _int_arg("max_model_len", max_model_len)
        if chunk_size is not None:
            _int_arg("chunk_size", chunk_size)
        if options is not None:  # the cache's options against the chunk size, before anything is built
            options.check(model.dispatcher.chunk_size if isinstance(model, HybridModel) else chunk_size or 64)
        self.model, auto_tok, tokenizer_note = _load_model(model, seed, backend, chunk_size, page_size)
        if tokenizer == "auto" and auto_tok is None and tokenizer_note is None:
            if self.model.config.vocab_size <= MAX_BYTE_VOCAB:
                auto_tok = ByteTokenizer()
            else:
                tokenizer_note = (f"the model was built in-process with a {self.model.config.vocab_size}-token "
                                  f"vocabulary, which is not this project's byte vocabulary")
        self.tokenizer = auto_tok if tokenizer == "auto" else tokenizer
        self.tokenizer_note = tokenizer_note if tokenizer == "auto" else "tokenizer=None was given"
        if self.tokenizer is not None and not (hasattr(self.tokenizer, "encode") and hasattr(self.tokenizer, "decode")):
            raise ValueError(f"tokenizer: needs encode() and decode(), got {type(self.tokenizer).__name__}")
        # the draft model (its vocabulary checked against the target's) before any pool or cache is built
        draft = (load_draft_model(spec.draft_model, self.model.config.vocab_size)
                 if spec is not None and spec.method == "draft" else None)
        self.chunk_size = self.model.dispatcher.chunk_size
        self.model.eval()
        self.config = self.model.config
        self.tracer = NULL_TRACER if tracer is None else tracer
        self.clock = StepClock()  # advanced by the scheduler; read by the cache and the trace hooks
        self.pool = UnifiedMemoryPool(self.config, memory_budget_bytes, page_size=page_size,
                                      checkpoint_dtype=checkpoint_dtype)
        self.cache_options = options
        self.prefix_cache = make_prefix_cache(options, self.pool, chunk_size=self.chunk_size, tracer=self.tracer,
                                              clock=self.clock)
        self.spec = spec
        self.max_model_len = max_model_len or self.config.max_position_embeddings
        drafter = None
        if draft is not None:
            drafter = DraftModelDrafter(draft, max_tokens=self.max_model_len + spec.num_speculative_tokens)
        self.scheduler = Scheduler(self.pool, self.prefix_cache, max_num_seqs, max_num_batched_tokens,
                                   eos_token_id=self.config.eos_token_id, tracer=self.tracer, clock=self.clock,
                                   spec=spec, drafter=drafter)
        hook = dispatch_hook(self.tracer, self.clock) if self.tracer.enabled else None
        static = (StaticDecode(self.model, self.pool.tensors, max_num_seqs, self.max_model_len, compile=torch_compile)
                  if static_decode else None)
        self.scheduler.pad_drafts = static_decode and spec is not None
        self.runner = ModelRunner(self.model, self.pool, on_dispatch=hook, mixed_batch=mixed_batch,
                                  verify_keep=VERIFY_KEEP_OF.get(spec.state if spec else None, "states"),
                                  static=static,
                                  cp=None if context_parallel_size == 1 else
                                  {"world_size": context_parallel_size, "backend": cp_backend, "timeout": cp_timeout})
        if context_parallel_size > 1:
            self.scheduler.cp_min_tokens = cp_min_tokens
        self.seed = seed
        self._requests: dict[int, Request] = {}
        self._next_id = 0
        self._prompt_tokens = 0

    # ---- requests ------------------------------------------------------------------------------
    def _encode(self, prompt) -> tuple[list[int], str | None]:
        if isinstance(prompt, str):  # text gets the model's BOS first, as a tokenizer would add it
            if not prompt:
                raise RequestError("prompt: empty")
            if self.tokenizer is None:
                raise RequestError(f"prompt: text needs this model's tokenizer, which is not available "
                                   f"({self.tokenizer_note}); pass token ids instead")
            try:
                ids = list(self.tokenizer.encode(prompt))
            except UnicodeError as e:
                raise RequestError(f"prompt: the text cannot be encoded ({e.reason} at {e.start})") from None
            bos = self.config.bos_token_id
            return ([bos] if bos is not None and bos < self.config.vocab_size else []) + ids, prompt
        if isinstance(prompt, torch.Tensor):
            if prompt.dim() != 1 or prompt.dtype.is_floating_point or prompt.dtype == torch.bool or prompt.is_complex():
                raise RequestError(f"prompt: a tensor prompt must be 1-D integer token ids, got "
                                   f"{prompt.dtype} of shape {tuple(prompt.shape)}")
            prompt = prompt.tolist()
        if not isinstance(prompt, (list, tuple)):
            raise RequestError(f"prompt: must be a str or a list of int token ids, got {type(prompt).__name__}")
        bad = next((t for t in prompt if isinstance(t, bool) or not isinstance(t, int)), None)
        if bad is not None or any(isinstance(t, bool) for t in prompt):
            raise RequestError(f"prompt: token ids must be ints, got {type(bad).__name__} {bad!r}")
        return list(prompt), None

    def _check(self, prompt, params) -> tuple[list[int], str | None, SamplingParams]:
        """Everything :meth:`add_request` checks, with nothing queued or allocated."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise RequestError(f"params: expected SamplingParams, got {type(params).__name__}")
        ids, text = self._encode(prompt)
        V = self.config.vocab_size
        if not ids:
            raise RequestError("prompt: empty")
        bad = [t for t in ids if not 0 <= t < V]
        if bad:
            raise RequestError(f"prompt: token id {bad[0]} is outside the vocabulary [0, {V})")
        if len(ids) + params.max_tokens > self.max_model_len:
            raise RequestError(f"prompt: {len(ids)} prompt tokens + max_tokens {params.max_tokens} exceed the "
                               f"context limit max_model_len={self.max_model_len}")
        states = 1 + self.scheduler.extra_state_slots()  # spec_state="slots": 1 + k per request
        need = (states * self.pool.sizes.state_bytes
                + self.scheduler.pages_for(len(ids) + params.max_tokens) * self.pool.sizes.kv_page_bytes)
        if need > self.pool.budget_bytes:
            raise RequestError(f"prompt: this request needs {need} B of cache at its longest, more than the whole "
                               f"memory budget ({self.pool.budget_bytes} B)")
        return ids, text, params

    def _enqueue(self, ids: list[int], text: str | None, params: SamplingParams) -> int:
        req_id = self._next_id
        self._next_id += 1
        gen = None
        if params.temperature > 0:
            gen = torch.Generator().manual_seed(params.seed if params.seed is not None else self.seed * 1_000_003 + req_id)
        req = Request(req_id, ids, params=params, prompt_text=text, generator=gen)
        self._requests[req_id] = req
        self.scheduler.add(req)
        self._prompt_tokens += len(ids)
        if self.tracer.enabled:
            self.tracer.emit(RequestArrived(step=self.clock.step, req_id=req_id, prompt_len=len(ids),
                                            max_tokens=params.max_tokens))
        return req_id

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None) -> int:
        """Queue a request; returns its id. Bad input raises :class:`RequestError` and queues nothing."""
        return self._enqueue(*self._check(prompt, params))

    def abort(self, req_id: int) -> bool:
        """Stop a request and free what it holds; False if it is unknown or already finished."""
        req = self.scheduler.abort(req_id)
        if req is None:
            return False
        req.finish_time = time.perf_counter()
        if self.tracer.enabled:
            self.tracer.emit(RequestAborted(step=self.clock.step, req_id=req_id))
        return True

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ---- the loop ------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One engine step -- schedule, one forward and sampling, postprocess (the scheduler owns the
        first and the last); returns the requests that finished in this step."""
        sched = self.scheduler.schedule()
        if not sched.items:
            return []
        try:
            out = self.runner.run(sched, return_chunk_states=self.prefix_cache.needs_chunk_states)
        except Exception as err:  # noqa: BLE001 -- the scheduler recovers (recompute, isolate the culprit)
            return [self._output(req) for req in self.scheduler.forward_failed(sched, err)]
        return [self._output(req) for req in self.scheduler.postprocess(sched, out)]

    def _output(self, req: Request) -> RequestOutput:
        text = self.tokenizer.decode(req.output_token_ids) if req.prompt_text is not None else None
        return RequestOutput.from_request(req, text)

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
                checked.append(self._check(p, sp))
            except RequestError as e:
                raise RequestError(f"prompts[{k}]: {e}") from None
        ids = [self._enqueue(*c) for c in checked]
        wanted = set(ids)
        done: dict[int, RequestOutput] = {}
        bar = tqdm(total=len(ids), desc="generate", unit="req", disable=not use_tqdm)
        while wanted - done.keys():
            if not self.has_unfinished():
                break
            for out in self.step():
                if out.req_id in wanted:
                    done[out.req_id] = out
                    bar.update(1)
        bar.close()
        for i in ids:  # aborted while generating
            if i not in done:
                done[i] = self._output(self._requests[i])
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
