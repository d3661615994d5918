"""``LLM``: the public entry point — a small continuous-batching engine for the hybrid model.

    from kda_ref import LLM, SamplingParams, ModelConfig
    llm = LLM(ModelConfig.tiny(), seed=0)
    outs = llm.generate(["Hello", "你好"], SamplingParams(max_tokens=16))

The loop per :meth:`step` (the article's execution chain, section 1.1): the
:class:`~kda_ref.engine.scheduler.Scheduler` picks decode tokens and prefill chunks under the
token budget, the :class:`~kda_ref.engine.runner.ModelRunner` runs them as one varlen forward over
the :class:`~kda_ref.memory.UnifiedMemoryPool`, finished requests give their slot and pages back.
Step-level driving (``add_request`` / ``step`` / ``abort``) is what streaming and the visualizer use.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from tqdm import tqdm

from ..memory import PageKind, UnifiedMemoryPool
from ..model import HybridModel, ModelConfig, load_pretrained
from ..tokenizer import ByteTokenizer
from ..trace import (NULL_TRACER, BatchComposition, ConvStateUpdate, KernelDispatch, PoolSnapshot,
                     RequestAborted, RequestArrived, RequestFinished, ScheduleDecision, StateSlotEvent)
from .block_prefix import BlockPrefixCache
from .prefix import RadixPrefixCache
from .request import Request, RequestError, RequestOutput, RequestStatus, SamplingParams
from .runner import ModelRunner, sample
from .scheduler import Scheduler

PREFIX_CACHE_MODES = ("none", "radix", "block")


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
        prefix_cache: str = "none",
        tracer=None,
        chunk_size: int = 64,
        max_model_len: int | None = None,
        checkpoint_policy: str = "chunk",
        checkpoint_interval: int | None = None,
        max_checkpoints_per_path: int | None = None,
        checkpoint_dtype: str = "fp32",
        block_size: int = 64,
        hash_unit: int = 16,
        mamba_cache_mode: str = "align",
        retention_interval: int | None = None,
        partial_hits: bool = False,
        eviction: str = "lru",
        marconi_alpha: float = 1.0,
        replay_granularity: str = "block",
    ):
        """``prefix_cache``: ``"none"``; ``"radix"`` (SGLang-style KDA-aware radix tree; options
        ``checkpoint_policy`` / ``checkpoint_interval`` / ``max_checkpoints_per_path``); ``"block"``
        (vLLM-style hashed state blocks; options ``block_size``, ``hash_unit`` (= the KV page size),
        ``mamba_cache_mode`` "all" | "align", ``retention_interval`` None | 0 | N, ``partial_hits``,
        ``eviction`` "lru" | "marconi" with ``marconi_alpha``, ``replay_granularity`` "block" | "unit"). ``checkpoint_dtype`` fp32 | bf16 | int8
        applies to both caches."""
        if prefix_cache not in PREFIX_CACHE_MODES:
            raise ValueError(f"prefix_cache: must be one of {PREFIX_CACHE_MODES}, got {prefix_cache!r}")
        if prefix_cache == "block":
            if not isinstance(hash_unit, int) or hash_unit < 1:
                raise ValueError(f"hash_unit: must be a positive int, got {hash_unit!r}")
            if not isinstance(block_size, int) or block_size < 1 or block_size % hash_unit:
                raise ValueError(f"block_size: must be a positive multiple of hash_unit={hash_unit}, got {block_size!r}")
            if page_size is not None and page_size != hash_unit:
                raise ValueError(f"page_size: the block cache uses one KV page per hash unit; leave page_size unset "
                                 f"or equal to hash_unit={hash_unit}, got {page_size!r}")
            page_size = hash_unit
        if page_size is None:
            page_size = 1 if prefix_cache == "radix" else 16
        for name, val in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens)):
            if not isinstance(val, int) or val < 1:
                raise ValueError(f"{name}: must be a positive int, got {val!r}")
        if isinstance(model, HybridModel):
            self.model = model
        elif isinstance(model, (str, Path)):
            self.model = load_pretrained(model, backend=backend, chunk_size=chunk_size)
        else:
            cfg = ModelConfig.tiny() if model is None else model
            if not isinstance(cfg, ModelConfig):
                raise ValueError(f"model: expected a ModelConfig, HybridModel or checkpoint folder, got {type(model).__name__}")
            self.model = HybridModel(cfg, seed=seed, backend=backend, chunk_size=chunk_size)
        self.model.eval()
        self.config = self.model.config
        self.tokenizer = ByteTokenizer()
        self.tracer = NULL_TRACER if tracer is None else tracer
        self.pool = UnifiedMemoryPool(self.config, memory_budget_bytes, page_size=page_size,
                                      checkpoint_dtype=checkpoint_dtype)
        self.prefix = None
        if prefix_cache == "radix":
            self.prefix = RadixPrefixCache(self.pool, chunk_size, self.tracer, policy=checkpoint_policy,
                                           interval=checkpoint_interval, max_per_path=max_checkpoints_per_path)
        elif prefix_cache == "block":
            self.prefix = BlockPrefixCache(self.pool, block_size=block_size, hash_unit=hash_unit, mode=mamba_cache_mode,
                                           retention_interval=retention_interval, partial_hits=partial_hits,
                                           eviction=eviction, alpha=marconi_alpha, chunk_size=chunk_size,
                                           tracer=self.tracer, replay_granularity=replay_granularity)
        self.scheduler = Scheduler(self.pool, max_num_seqs, max_num_batched_tokens, tracer=self.tracer,
                                   prefix=self.prefix, align=chunk_size)
        self.runner = ModelRunner(self.model, self.pool)
        self.max_model_len = max_model_len or self.config.max_position_embeddings
        self.seed = seed
        self.model.dispatcher.on_dispatch = self._on_dispatch if self.tracer.enabled else None
        self._requests: dict[int, Request] = {}
        self._next_id = 0
        self._step = 0
        self._stats = {"prompt_tokens": 0, "computed_prompt_tokens": 0, "cached_prompt_tokens": 0,
                       "generated_tokens": 0, "steps": 0, "forward_tokens": 0}

    # ---- requests ------------------------------------------------------------------------------
    def _encode(self, prompt) -> tuple[list[int], str | None]:
        if isinstance(prompt, str):  # text gets the model's BOS first, as a tokenizer would add it
            if not prompt:
                raise RequestError("prompt: empty")
            bos = self.config.bos_token_id
            ids = self.tokenizer.encode(prompt)
            return ([bos] if bos is not None and bos < self.config.vocab_size else []) + ids, prompt
        if isinstance(prompt, torch.Tensor):
            prompt = prompt.tolist()
        if not isinstance(prompt, (list, tuple)) or not all(isinstance(t, int) for t in prompt):
            raise RequestError("prompt: must be a str or a list of int token ids")
        return list(prompt), None

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None) -> int:
        """Queue a request; returns its id. Bad input raises :class:`RequestError` and queues nothing."""
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
        need = self.pool.sizes.state_bytes + self.scheduler.pages_for(len(ids) + params.max_tokens) * self.pool.sizes.kv_page_bytes
        if need > self.pool.budget_bytes:
            raise RequestError(f"prompt: this request needs {need} B of cache at its longest, more than the whole "
                               f"memory budget ({self.pool.budget_bytes} B)")
        req_id = self._next_id
        self._next_id += 1
        gen = None
        if params.temperature > 0:
            gen = torch.Generator().manual_seed(params.seed if params.seed is not None else self.seed * 1_000_003 + req_id)
        req = Request(req_id, ids, params, prompt_text=text, generator=gen)
        self._requests[req_id] = req
        self.scheduler.add(req)
        self._stats["prompt_tokens"] += len(ids)
        if self.tracer.enabled:
            self.tracer.emit(RequestArrived(step=self._step, req_id=req_id, prompt_len=len(ids),
                                            max_tokens=params.max_tokens))
        return req_id

    def abort(self, req_id: int) -> bool:
        """Stop a request and free what it holds; False if it is unknown or already finished."""
        req = self.scheduler.abort(req_id)
        if req is None:
            return False
        req.finish_time = time.perf_counter()
        if self.tracer.enabled:
            self.tracer.emit(RequestAborted(step=self._step, req_id=req_id))
        return True

    def _on_dispatch(self, choice) -> None:
        self.tracer.emit(KernelDispatch(step=self._step, layer=choice.layer, phase=choice.phase.value,
                                        kernel=choice.kernel, backend=choice.backend, num_seqs=choice.num_seqs,
                                        num_tokens=choice.num_tokens))

    def _trace_step(self, sched, batch) -> None:
        tr, step = self.tracer, self._step
        items = sched.items
        tr.emit(ScheduleDecision(
            step=step, running=[r.req_id for r in self.scheduler.running],
            waiting=[r.req_id for r in self.scheduler.waiting], admitted=[r.req_id for r in sched.admitted],
            prefill_chunks=[(it.req.req_id, it.num_new_tokens) for it in items if not it.is_decode],
            decodes=[it.req.req_id for it in items if it.is_decode], token_budget=sched.token_budget,
            tokens_scheduled=sched.num_tokens))
        phases = [g.phase.value for g in batch.phase_groups() for _ in g.seq_ids.tolist()]
        order = [n for g in batch.phase_groups() for n in g.seq_ids.tolist()]
        phase_of = dict(zip(order, phases))
        req_ids, slots = [it.req.req_id for it in items], [it.req.slot for it in items]
        tr.emit(BatchComposition(
            step=step, req_ids=req_ids, cu_seqlens=batch.cu_seqlens.tolist(), context_lens=batch.context_lens.tolist(),
            phases=[phase_of[n] for n in range(len(items))], state_indices=slots, num_tokens=batch.num_tokens,
            block_tables=[list(it.req.pages) for it in items]))
        for layer in self.config.kda_layer_ids:
            tr.emit(StateSlotEvent(step=step, op="write", slots=slots, req_ids=req_ids, layer=layer))
            tr.emit(ConvStateUpdate(step=step, layer=layer, slots=slots))
        used = {k.value: v for k, v in self.pool.used_bytes.items()}
        used["total"] = self.pool.total_used_bytes
        cap = {k.value: self.pool.budget_bytes for k in self.pool.used_bytes}
        cap["total"] = self.pool.budget_bytes
        tr.emit(PoolSnapshot(step=step, capacity_bytes=cap, used_bytes=used,
                             owners=PoolSnapshot.owners_from(self.pool.ownership())))

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ---- the loop ------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Schedule, run one forward, sample; returns the requests that finished in this step."""
        self._step += 1
        self.scheduler.step_id = self._step
        if self.prefix is not None:
            self.prefix.step_id = self._step
        sched = self.scheduler.schedule()
        for req_id, hit in sched.cache_hits:
            self._stats["cached_prompt_tokens"] += min(hit, len(self._requests[req_id].prompt_token_ids))
        self._stats["steps"] += 1
        if not sched.items:
            return []
        logits, batch = self.runner.run(sched, return_chunk_states=self.prefix is not None and self.prefix.needs_chunk_states)
        if self.tracer.enabled:
            self._trace_step(sched, batch)
        self._stats["forward_tokens"] += sched.num_tokens
        if self.prefix is not None:
            self.prefix.save_chunk_states(sched.items, batch, self.config.kda_layer_ids, self.scheduler.align)
        finished = []
        for n, it in enumerate(sched.items):
            req = it.req
            prompt_part = max(0, min(len(req.prompt_token_ids), it.start + it.num_new_tokens) - it.start)
            self._stats["computed_prompt_tokens"] += prompt_part
            req.num_computed_tokens += it.num_new_tokens
            if self.prefix is not None:
                self.prefix.snapshot(req, req.num_computed_tokens)  # if the policy keeps this boundary
            if not it.completes:
                continue
            tok = sample(logits[n], req.params.temperature, req.params.top_k, req.generator)
            if req.params.return_logits:
                req.logits.append(logits[n].clone())
            req.output_token_ids.append(tok)
            self._stats["generated_tokens"] += 1
            if req.first_token_time is None:
                req.first_token_time = time.perf_counter()
            reason = self._finish_reason(req, tok)
            if reason:
                req.status, req.finish_reason, req.finish_time = RequestStatus.FINISHED, reason, time.perf_counter()
                if self.prefix is not None:
                    self.prefix.donate(req)
                self.scheduler.finish(req)
                finished.append(self._output(req))
                if self.tracer.enabled:
                    self.tracer.emit(RequestFinished(step=self._step, req_id=req.req_id, reason=reason,
                                                     output_len=len(req.output_token_ids)))
        return finished

    def _finish_reason(self, req: Request, tok: int) -> str | None:
        p = req.params
        if tok in p.stop_token_ids or (not p.ignore_eos and tok == self.config.eos_token_id):
            return "stop"
        if len(req.output_token_ids) >= p.max_tokens:
            return "length"
        return None

    def _output(self, req: Request) -> RequestOutput:
        text = self.tokenizer.decode(req.output_token_ids) if req.prompt_text is not None else None
        return RequestOutput.from_request(req, text)

    def generate(self, prompts, params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool = False) -> list[RequestOutput]:
        """Run ``prompts`` (strings or token-id lists) to completion; outputs in prompt order."""
        if isinstance(prompts, (str, torch.Tensor)) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        plist = params if isinstance(params, list) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise RequestError(f"params: {len(plist)} SamplingParams for {len(prompts)} prompts")
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, plist)]
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
        if self.prefix is not None:
            self.prefix.flush()

    def stats(self) -> dict:
        s = dict(self._stats)
        if self.prefix is not None:
            s.update(self.prefix.stats)
            s.update(self.prefix.occupancy())
            s["checkpoint_bytes"] = self.pool.used_bytes[PageKind.CHECKPOINT]
        s["preemptions"] = self.scheduler.num_preemptions
        s["peak_pool_bytes"] = {k.value: v for k, v in self.pool.peak_bytes.items()}
        s["peak_pool_bytes"]["total"] = self.pool.peak_total_bytes
        s["pool_used_bytes"] = {k.value: v for k, v in self.pool.used_bytes.items()}
        s["budget_bytes"] = self.pool.budget_bytes
        return s
