"""The cost-model simulator: the engine's prefix caches driven without running the model.

``docs/article.md#s9-2`` (``cache.checkpoint_density``) at serving scale. A :class:`CacheSimulator` feeds a
workload's requests, in arrival order and one after another, through the same cache objects the engine uses
(:func:`~kda_ref.cache.make_prefix_cache`) over a :class:`~kda_ref.memory.VirtualPool`, in the order of the
scheduler and ``LLM.step``; the model's work is :class:`~kda_ref.cache.cost.CostModel` arithmetic.
``marconi_alpha="auto"`` tunes alpha on a bootstrap window (Marconi ``ConfigTuner.tune_config``); the replay
rebuilds the window's starting point by re-serving the requests before it: exactly the snapshot Marconi copies.
Design notes: ``docs/block_cache.md#the-cost-model-simulator``, ``docs/workloads.md#in-the-cost-model-simulator``
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..cache import PrefixCache, Sequence, cache_options, make_prefix_cache, pool_page_size, prefix_cache_modes
from ..cache.cost import CostModel
from ..memory import PageKind, VirtualPool
from ..model.config import ModelConfig
from ..trace import StepClock
from ..utils import cdiv
from ..utils.stats import nearest_rank

ALPHA_GRID = (0.0, 0.5, 1.0, 1.5, 2.0)


class SimulationError(ValueError):
    """The simulator cannot serve a request (budget too small for one request) or got bad options."""


@dataclass
class SimResult:
    policy: str
    budget_bytes: int
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefill_flops: float = 0.0  # what a cache-less server computes
    flops_saved: float = 0.0
    peak_checkpoint_bytes: int = 0
    checkpoint_byte_steps: float = 0.0  # sum over requests of checkpoint bytes held (for the mean)
    ttft_s: list[float] = field(default_factory=list)
    hits: int = 0
    evictions: int = 0
    alpha: float | None = None
    wall_s: float = 0.0

    @property
    def token_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def flops_saved_frac(self) -> float:
        return self.flops_saved / self.prefill_flops if self.prefill_flops else 0.0

    def summary(self) -> dict:
        t = self.ttft_s
        p95 = nearest_rank(t, 95) or 0.0  # int(0.95 n) was one rank high: the maximum of 20 values
        return {"policy": self.policy, "budget_gib": self.budget_bytes / 2**30, "requests": self.requests,
                "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "token_hit_rate": self.token_hit_rate, "prefill_tflops": self.prefill_flops / 1e12,
                "flops_saved_tflops": self.flops_saved / 1e12, "flops_saved_frac": self.flops_saved_frac,
                "peak_checkpoint_gib": self.peak_checkpoint_bytes / 2**30,
                "mean_checkpoint_gib": self.checkpoint_byte_steps / max(self.requests, 1) / 2**30,
                "ttft_mean_ms": 1e3 * sum(t) / max(len(t), 1), "ttft_p95_ms": 1e3 * p95, "hits": self.hits,
                "evictions": self.evictions, "alpha": self.alpha, "wall_s": self.wall_s}


def _make_cache(kind: str, pool: VirtualPool, options: dict, chunk_size: int, cost: CostModel, alpha: float,
                clock: StepClock) -> PrefixCache:
    """The engine's factory with the simulator's error type (``alpha`` replaces ``marconi_alpha``)."""
    if kind not in prefix_cache_modes():
        raise SimulationError(f"cache: must be one of {prefix_cache_modes()}, got {kind!r}")
    try:
        opts = cache_options(kind, **options)
    except ValueError as err:
        raise SimulationError(str(err)) from None
    opts = opts.with_alpha(alpha) if opts is not None else None
    return make_prefix_cache(opts, pool, chunk_size=chunk_size, cost=cost, clock=clock)


class CacheSimulator:
    """Serve a workload through one prefix-cache configuration at ``config``'s sizes.

    ``cache`` is ``"none"`` | ``"radix"`` | ``"block"`` and ``options`` the matching ``LLM`` keyword
    arguments (``checkpoint_policy=...`` or ``block_size=..., retention_interval=..., eviction=...``;
    ``marconi_alpha="auto"`` tunes alpha on a bootstrap window). ``token_budget`` is the prefill
    chunk per step (``max_num_batched_tokens``)."""

    def __init__(self, config: ModelConfig, cache: str, budget_bytes: int, options: dict | None = None, *,
                 name: str | None = None, chunk_size: int = 64, token_budget: int = 8192,
                 cost: CostModel | None = None, alpha_grid=ALPHA_GRID, max_window: int = 1000,
                 evict_batch: float = 0.01, dtype=None):
        options = dict(options or {})
        if not isinstance(token_budget, int) or token_budget < 1:
            raise SimulationError(f"token_budget: must be a positive int, got {token_budget!r}")
        self.config, self.kind, self.options = config, cache, options
        self.name = name or cache
        self.budget, self.chunk_size, self.token_budget = budget_bytes, chunk_size, token_budget
        self.cost = cost or CostModel(config)
        self.alpha_grid, self.max_window = tuple(alpha_grid), max_window
        self.evict_batch = evict_batch  # once evicting, free this fraction of the budget beyond the need
        self.dtype = dtype  # KV / conv storage dtype of the virtual pool (bf16 as served; fp32 = the CPU engine)
        self.auto_alpha = options.get("marconi_alpha") == "auto"  # the simulator's own value: tune it
        if self.auto_alpha:
            del options["marconi_alpha"]
        if cache not in prefix_cache_modes():
            raise SimulationError(f"cache: must be one of {prefix_cache_modes()}, got {cache!r}")
        try:
            probe = cache_options(cache, **options)
        except ValueError as err:
            raise SimulationError(str(err)) from None
        self.scores_by_cost = probe is not None and probe.scores_by_cost
        if self.auto_alpha and not self.scores_by_cost:
            raise SimulationError("marconi_alpha: 'auto' needs eviction='marconi'")
        self.alpha = probe.marconi_alpha if self.scores_by_cost and not self.auto_alpha else 1.0
        self._build(self.alpha)

    def _build(self, alpha: float) -> None:
        opts = self.options
        try:
            page_size = pool_page_size(cache_options(self.kind, **opts))
            kw = {} if self.dtype is None else {"dtype": self.dtype}
            self.pool = VirtualPool(self.config, self.budget, page_size=page_size, **kw)
        except ValueError as err:
            raise SimulationError(str(err)) from None
        self.clock = StepClock()  # one step per served request
        self.prefix_cache = _make_cache(self.kind, self.pool, opts, self.chunk_size, self.cost, alpha, self.clock)
        self.prefix_cache.evict_slack_bytes = int(self.evict_batch * self.budget)
        self.result = SimResult(self.name, self.budget, alpha=alpha if self.scores_by_cost else None)
        self.served = 0

    # ---- one request ---------------------------------------------------------------------------------
    def _room(self, kind: PageKind, n: int, what: str) -> None:
        self.prefix_cache.make_room(kind, n)
        if not self.pool.can_alloc(kind, n):
            raise SimulationError(f"budget_bytes: {self.budget} B cannot hold {what}")

    def _grow(self, req: Sequence, upto: int) -> None:
        need = cdiv(upto, self.pool.sizes.page_size) - len(req.pages)
        if need > 0:
            self._room(PageKind.MLA_KV, need, f"the KV of request {req.req_id} ({upto} tokens)")
            req.pages.extend(self.pool.alloc(PageKind.MLA_KV, need, owner=req.req_id))

    def serve(self, req_id: int, prompt, output) -> int:
        """Serve one request; returns the prompt tokens it reused."""
        output = list(output)
        if not output:  # before anything is admitted or allocated for it
            raise SimulationError(f"requests: request {req_id} has no output token (a request generates one at least)")
        cache, pool = self.prefix_cache, self.pool
        req = Sequence(req_id, list(prompt))
        self.clock.step = self.served
        self._room(PageKind.KDA_STATE, 1, "one state")
        hit = cache.admit(req)
        cache.admitted(req, hit)
        if req.slot is None:
            (req.slot,) = pool.alloc(PageKind.KDA_STATE, 1, owner=req_id)
        L = len(prompt)
        while req.num_computed_tokens < L:  # prefill, chunk by chunk
            start = req.num_computed_tokens
            n = cache.align_chunk(req, min(L - start, self.token_budget))
            self._grow(req, start + n)
            if cache.needs_chunk_states:
                for p in range(start + self.chunk_size, start + n, self.chunk_size):
                    cache.offer_chunk_state(req, start, p, _no_write)
            req.num_computed_tokens += n
            cache.snapshot(req, req.num_computed_tokens, start)
        req.output_token_ids.append(output[0])
        target = L + len(output) - 1  # every output token but the last is computed
        step = cache.decode_stride()
        while req.num_computed_tokens < target:  # decode, stopping where a cache can act
            stop = min(target, (req.num_computed_tokens // step + 1) * step)
            self._grow(req, stop)
            req.output_token_ids.extend(output[len(req.output_token_ids): stop - L + 1])
            req.num_computed_tokens = stop
            cache.snapshot(req, stop, stop - 1)  # as the last decode step of the stretch
        cache.donate(req)
        if req.slot is not None:
            pool.free(PageKind.KDA_STATE, [req.slot])
        own = req.pages[cache.shared_tokens(req) // pool.sizes.page_size:]
        if own:
            pool.free(PageKind.MLA_KV, own)
        cache.release(req)
        self._account(L, hit)
        return hit

    def _account(self, L: int, hit: int) -> None:
        r, cost = self.result, self.cost
        r.requests += 1
        r.prompt_tokens += L
        r.cached_tokens += hit
        r.hits += hit > 0
        r.prefill_flops += cost.prefill_flops(0, L)
        r.flops_saved += cost.prefill_flops(0, hit)
        r.ttft_s.append(cost.prefill_seconds(hit, L, restored_states=int(hit > 0)))
        ckpt = self.pool.used_bytes[PageKind.CHECKPOINT]
        r.peak_checkpoint_bytes = max(r.peak_checkpoint_bytes, ckpt)
        r.checkpoint_byte_steps += ckpt
        r.evictions = self.prefix_cache.stats.get("checkpoints_evicted", 0)
        self.served += 1

    # ---- a whole workload ------------------------------------------------------------------------------
    def run(self, requests, progress: bool = False) -> SimResult:
        """Serve ``requests`` (``WorkloadRequest``s, or ``(prompt, output)`` pairs) in order."""
        from tqdm import tqdm

        reqs = [(r.prompt, r.output) if hasattr(r, "prompt") else tuple(r) for r in requests]
        t0 = time.perf_counter()
        first_evict, tuned = None, not self.auto_alpha
        for i, (prompt, output) in enumerate(tqdm(reqs, desc=self.name, unit="req", disable=not progress)):
            self.serve(i, prompt, output)
            if tuned:
                continue
            if first_evict is None and self.result.evictions > 0:
                first_evict = i + 1
                window = min(5 * first_evict, self.max_window)
            if first_evict is not None and i + 1 == first_evict + window:
                self._set_alpha(tune_alpha(self, reqs[:first_evict], reqs[first_evict:first_evict + window]))
                tuned = True
        self.result.wall_s = time.perf_counter() - t0
        return self.result

    def _set_alpha(self, alpha: float) -> None:
        self.alpha = alpha
        self.prefix_cache.table.alpha = alpha
        self.result.alpha = alpha


def _no_write(_slot: int) -> None:
    """The simulator has no tensors: a checkpoint is only accounted for."""


def tune_alpha(sim: CacheSimulator, warmup, window, grid=None) -> float:
    """Marconi's tuner: replay ``window`` after ``warmup`` for every alpha in ``grid`` (default the
    simulator's) and return the alpha whose replay saved the most prefill FLOPs in the window (the
    first such alpha on ties)."""
    best, best_saved = None, -1.0
    for alpha in grid or sim.alpha_grid:
        opts = dict(sim.options, marconi_alpha=alpha)
        trial = CacheSimulator(sim.config, sim.kind, sim.budget, opts, chunk_size=sim.chunk_size,
                               token_budget=sim.token_budget, cost=sim.cost, evict_batch=sim.evict_batch,
                               dtype=sim.dtype)
        for i, (p, o) in enumerate(warmup):
            trial.serve(i, p, o)
        before = trial.result.flops_saved
        for i, (p, o) in enumerate(window, start=len(warmup)):
            trial.serve(i, p, o)
        saved = trial.result.flops_saved - before
        if saved > best_saved:
            best, best_saved = alpha, saved
    return best
