"""``ModelRunner``: turns a scheduler decision into ONE varlen forward and samples the results.

Article concept ``varlen.metadata``: the batch is the packed new tokens of every scheduled
request plus, per request, ``cu_seqlens``, the tokens already cached (``context_lens``), its KDA
state slot (``state_indices``) and its MLA pages (``block_table``) — SGLang's ``ForwardBatch``
built by ``ScheduleBatch.get_model_worker_batch``, vLLM's ``GPUModelRunner._prepare_inputs``.

The runner builds every tensor of the batch from host lists in one ``torch.tensor`` call each,
calls :meth:`HybridModel.forward_batch` (no re-validation of what it just built; an all-decode
batch takes the model's fused decode step), and samples the next token of every request whose
known tokens are now all cached (nano-vllm's ``ModelRunner.run`` returns sampled ids the same way).
With ``static_decode``, an all-decode or uniform verify step goes to its bucket
(:mod:`kda_ref.engine.static_decode`) straight from the scheduled items, with no ``ForwardBatch``
(built only if the tracer asks for it), and its greedy tokens come computed by the step.
The engine's trace hook (``on_dispatch``) travels with each forward call, so engines that share a
model never record each other's kernels. :meth:`ModelRunner.run` runs under ``torch.inference_mode``:
no autograd view or version-counter bookkeeping on the few hundred small ops of a step (on the
2-core CPU: ~10% less time per batch-8 decode step than under ``no_grad``, alternated runs); what it
returns (logits, per-token states) is read, copied or cloned afterwards, never written in place.

Speculative items (a decode request with draft tokens, ``ScheduledItem.drafts``) run as *verify*
segments of the same forward: the last committed token and the ``k`` drafts, the logits of all
``1 + k`` positions, and the state after every one of them (:class:`SpecStep`). The runner decides
acceptance (:mod:`kda_ref.speculative.accept`); the scheduler, which knows where the request stops,
commits the state of the last token it keeps through the rollback strategy
(:class:`kda_ref.speculative.RollbackStrategy`; ReplaySSM's fold after a static verify step is
:meth:`ModelRunner.fold_replay`). The step's output, :class:`StepOutput`, is data: nothing in it writes
the pool.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..memory import PageKind, UnifiedMemoryPool
from ..model import ForwardBatch, HybridModel
from ..model.batch import PAD_SLOT_ID
from ..model.cache import PAD_PAGE
from ..model.cache import BoundaryState
from ..model.output import BoundaryStates, ForwardOutput
from ..model.verify_record import KEEP_STATES, VerifyRecord
from ..parallel import ContextParallelError, ContextParallelFallback, PrefixState, context_parallel_prefill
from ..speculative import AcceptResult, accept_greedy, accept_greedy_tokens, accept_rejection
from ..speculative.tree import accept_tree
from .scheduler import SchedulerOutput
from .static_decode import StaticDecode, StaticStepInfo
from .tree_verify import TreeStep, run_tree


@dataclass
class SpecStep:
    """One speculative item's verify result: acceptance, logits and the per-step states."""

    result: AcceptResult
    logits: torch.Tensor  # [1 + k, vocab]: after the last committed token, then after each draft
    rows: list[int]  # per KDA layer's step states: row of the state after verified token i (i = 0..k)
    context: int  # tokens cached before the step (= ScheduledItem.start)
    # spec_state="slots" through the fused verify step: the slots the step wrote the state after verified
    # token i into, in place (then there are no step states for this item); None otherwise
    slots: list[int] | None = None


@dataclass
class StepOutput:
    """What one engine step's forward produced."""

    logits: torch.Tensor  # [N, vocab] fp32: the last token of every scheduled request
    token_ids: list[int | None]  # [N] the sampled next token of every request that completes, else None
    _batch: ForwardBatch | Callable[[], ForwardBatch]  # the metadata the forward ran with, or what builds it
    chunk_states: dict = field(default_factory=dict)  # KDA layer -> BoundaryStates (when asked for)
    errors: dict[int, str] = field(default_factory=dict)  # item index -> why sampling failed for it
    spec: dict[int, SpecStep] = field(default_factory=dict)  # item index -> its verify result
    step_states: dict = field(default_factory=dict)  # KDA layer -> BoundaryStates of the verify segments
    trajectories: dict = field(default_factory=dict)  # KDA layer -> Trajectory of the verify segments (replay)
    replayed: dict = field(default_factory=dict)  # item index -> {KDA layer: (recurrent [L], conv [L])} (replay)
    static: StaticStepInfo | None = None  # the bucket a static-shape decode step ran as
    tree: dict[int, TreeStep] = field(default_factory=dict)  # item index -> its verified draft tree
    # a static KEEP_INPUTS verify step: its rows (the step's first items), which ReplaySSM folds as one bucket
    # step (ModelRunner.fold_replay); 0 otherwise
    fold_rows: int = 0

    @property
    def static_fold(self) -> bool:
        return self.fold_rows > 0

    @property
    def batch(self) -> ForwardBatch:
        """The step's :class:`ForwardBatch` (a static step's is built when first asked for: only the
        tracer reads it)."""
        if not isinstance(self._batch, ForwardBatch):
            self._batch = self._batch()
        return self._batch

    def verified_states(self, n: int, layers: list[int], upto: int | None = None,
                        pool: UnifiedMemoryPool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The states after verified tokens ``0 .. upto-1`` of item ``n``, all KDA layers:
        ``(recurrent [L, layers, H, K, V], conv [L, layers, 3D, W-1])``, from the verify's per-token
        states, from the slots the step wrote them into (``pool``), or what a ReplaySSM fold left
        (``replayed``). Read only: the rollback strategies and :meth:`accepted_states` call it."""
        if n in self.replayed:
            rec = torch.stack([self.replayed[n][layer][0] for layer in layers], dim=1)
            conv = torch.stack([self.replayed[n][layer][1] for layer in layers], dim=1)
            return rec[:upto], conv[:upto]
        if self.spec[n].slots is not None:  # written into the request's slots by the step: read them there
            t, idx = pool.tensors, torch.tensor(self.spec[n].slots[:upto], dtype=torch.long)
            assert layers == list(t.kda_index), "the pools hold every KDA layer, in order"
            return t.recurrent[:, idx].transpose(0, 1), t.conv[:, idx].transpose(0, 1)  # [upto, layers, ...] copies
        idx = torch.tensor(self.spec[n].rows[:upto], dtype=torch.long)
        rec = torch.stack([self.step_states[layer].recurrent[idx] for layer in layers], dim=1)
        conv = torch.stack([self.step_states[layer].conv[idx] for layer in layers], dim=1)
        return rec, conv

    def accepted_states(self, kept: dict[int, int], pool: UnifiedMemoryPool) -> dict:
        """The states strictly inside what each item keeps (``kept[n]`` verified tokens), as
        :class:`~kda_ref.model.output.BoundaryStates` per KDA layer: what a prefix cache may save
        from a speculative step -- never a state after a rejected draft."""
        items = [(n, k) for n, k in kept.items() if k > 1]
        if not items or not (self.step_states or self.replayed or any(self.spec[n].slots for n, _ in items)):
            return {}
        layers = list(pool.config.kda_layer_ids)
        per = {n: self.verified_states(n, layers, k - 1, pool) for n, k in items}
        out = {}
        for i, layer in enumerate(layers):
            out[layer] = BoundaryStates(
                seq_ids=torch.tensor([n for n, _ in items], dtype=torch.long),
                positions=[torch.arange(1, k) + self.spec[n].context for n, k in items],
                recurrent=torch.cat([per[n][0][:, i] for n, _ in items]),
                conv=torch.cat([per[n][1][:, i] for n, _ in items]))
        return out


class ModelRunner:
    def __init__(self, model: HybridModel, pool: UnifiedMemoryPool, on_dispatch=None, mixed_batch: str = "chunk",
                 record: VerifyRecord = KEEP_STATES, static: StaticDecode | None = None, cp: dict | None = None):
        self.model = model
        # context parallelism: {"world_size", "backend", "timeout"} for context_parallel_prefill; None: off
        self.cp = cp
        self.cp_counters = {"cp_prefills": 0, "cp_fallbacks": 0, "cp_sent_bytes": 0}
        self.cp_last_error: str | None = None
        self.static = static  # all-decode steps run as fixed-shape buckets (LLM(static_decode=True))
        self.record = record  # what a verify keeps: the rollback strategy's VerifyRecord
        self.pool = pool
        self.mixed_batch = mixed_batch  # how a step mixing decodes and prefill chunks runs (ForwardBatch)
        self.on_dispatch = on_dispatch  # this engine's kernel trace hook, passed with every forward
        self.device = next(model.parameters()).device

    def build_batch(self, sched: SchedulerOutput, return_chunk_states: bool = False) -> tuple[torch.Tensor, ForwardBatch]:
        items = sched.items
        ids, cu, ctx, slots = [], [0], [], []
        for it in items:
            known = it.num_new_tokens - len(it.drafts)
            ids.extend(it.req.all_token_ids[it.start:it.start + known])
            ids.extend(it.drafts)  # a speculative item verifies its drafts after its last committed token
            cu.append(cu[-1] + it.num_new_tokens)
            ctx.append(it.start)
            slots.append(it.req.slot)
        max_pages = max(len(it.req.pages) for it in items)
        L = uniform_length(items)
        # spec_state="slots": the fused verify step writes token t's state into the request's t-th slot
        verify_slots = (torch.tensor(self._verify_slots(items, L), dtype=torch.long, device=self.device)
                        if self.record.writes_slots and L is not None and L > 1 else None)
        table = [list(it.req.pages) + [PAD_PAGE] * (max_pages - len(it.req.pages)) for it in items]  # [N, max_pages]
        dev = self.device
        batch = ForwardBatch(cu_seqlens=torch.tensor(cu, dtype=torch.long, device=dev),
                             context_lens=torch.tensor(ctx, dtype=torch.long, device=dev),
                             state_indices=torch.tensor(slots, dtype=torch.long, device=dev),
                             block_table=torch.tensor(table, dtype=torch.long, device=dev),
                             return_chunk_states=return_chunk_states, mixed_batch=self.mixed_batch,
                             verify_seqs=tuple(n for n, it in enumerate(items) if it.drafts),
                             verify_keep=self.record, verify_slots=verify_slots)
        return torch.tensor(ids, dtype=torch.long, device=dev), batch

    @torch.inference_mode()
    def run(self, sched: SchedulerOutput, return_chunk_states: bool = False) -> StepOutput:
        """Forward the scheduled tokens and sample where a request completes its known tokens; for a
        speculative item, decide how many drafts the target accepts."""
        # items with a draft tree come last (the scheduler orders them so) and run in forwards of their own;
        # ``main`` is the rest of the step
        first_tree = next((n for n, it in enumerate(sched.items) if it.tree is not None), len(sched.items))
        assert all(it.tree is not None for it in sched.items[first_tree:]), "tree items must come last"
        main = sched if first_tree == len(sched.items) else \
            SchedulerOutput(items=sched.items[:first_tree], token_budget=sched.token_budget)
        ran = self._run_static(main) if main.items else None  # a static step needs only the host lists
        if not main.items:  # every item verifies a tree: no other forward this step
            fwd, batch, rows = ForwardOutput(torch.empty(0, self.model.config.vocab_size, device=self.device)), None, None
        elif ran is not None:
            fwd, batch = ran[0], None
            rows = "all" if main.items[0].drafts else None  # a static verify step: every row verifies
        else:
            input_ids, batch = self.build_batch(main, return_chunk_states)
            rows = self._logit_rows(main, batch)
            cp = self._run_cp(main, return_chunk_states) if self.cp is not None and main.items[0].context_parallel else None
            if cp is not None:
                fwd = cp
            else:
                fwd = self.model.forward_batch(input_ids, batch, self.pool.tensors, on_dispatch=self.on_dispatch,
                                               logits="last" if rows is None else rows)
        logits = fwd.logits.float()
        tokens: list[int | None] = []
        errors: dict[int, str] = {}
        spec: dict[int, SpecStep] = {}
        # spec_state="slots" through the fused verify step: the states went to the slots, none came back
        in_place = self.record.writes_slots and not fwd.step_states
        # a static step computed every row's greedy token and finiteness already: one host read
        pre = fwd.greedy.tolist() if fwd.greedy is not None else None  # [[token per row], [1 if finite]]
        greedy = GreedyRows(logits, pre) if rows is None else None  # one argmax for every greedy decode row
        at, step_row, last_rows = 0, 0, []  # next row of ``logits`` / of the verify segments' step states
        for n, it in enumerate(main.items):
            nrows = len(it.drafts) + 1 if it.drafts else 1
            mine = logits[at:at + nrows]
            at += nrows
            last_rows.append(at - 1)
            tok = None
            try:  # one request's bad logits or sampling parameters must not stop the others
                if it.drafts:
                    res = self._accept(mine, it, None if pre is None else (pre[0][at - nrows:at], pre[1][at - nrows:at]))
                    spec[n] = SpecStep(res, mine, list(range(step_row, step_row + nrows)), it.start,
                                       slots=it.req.spec_slots[:nrows] if in_place else None)
                    tok = res.next_token
                elif it.completes and greedy is not None and it.req.params.temperature == 0:
                    tok = greedy.token(n)
                elif it.completes:
                    tok = sample(mine[0], it.req.params.temperature, it.req.params.top_k, it.req.generator)
            except Exception as err:  # noqa: BLE001 -- reported on that request, not raised
                errors[n] = f"sampling failed: {err}"
            if it.drafts:
                step_row += nrows
            tokens.append(tok)
        out_logits = logits if rows is None else logits[last_rows]
        trees = self._run_trees(sched, first_tree, errors)
        if first_tree < len(sched.items):  # the root logits of the tree items (zeros where one failed)
            roots = [trees[n].root_logits if n in trees else logits.new_zeros(logits.shape[-1])
                     for n in range(first_tree, len(sched.items))]
            out_logits = torch.cat([out_logits, torch.stack(roots)])
            tokens += [None] * len(roots)
        # the tracer reads the step's ForwardBatch (every item; a tree item as its root's decode); a static
        # step or a tree step builds it only then
        made = batch if main is sched and batch is not None else (lambda: self.build_batch(sched, return_chunk_states)[1])
        fold_rows = len(main.items) if ran is not None and fwd.trajectories else 0  # ReplaySSM's fold: a bucket step
        return StepOutput(logits=out_logits, token_ids=tokens, _batch=made,
                          chunk_states=fwd.chunk_states, errors=errors, spec=spec, step_states=fwd.step_states,
                          trajectories=fwd.trajectories, static=None if ran is None else ran[1], tree=trees,
                          fold_rows=fold_rows)

    def fold_replay(self, out: StepOutput, kept: dict[int, int], slots: dict[int, int]) -> dict | None:
        """ReplaySSM's fold after a static verify step (``out.static_fold``): item ``n`` folds its ``kept[n]``
        tokens into ``slots[n]`` (an item not in ``kept`` -- it failed -- folds nothing), all as one bucket
        step of the verify's shape (:meth:`kda_ref.engine.static_decode.StaticDecode.fold`, which writes the
        slots). Returns each item's ``{layer: (states, windows)}`` after its kept tokens, or ``None`` when
        no bucket holds the step. Called by :meth:`kda_ref.speculative.ReplaySSM.commit`."""
        if self.static is None or not out.static_fold:
            return None
        N = out.fold_rows
        res = self.static.fold(out.trajectories, [kept.get(n, 0) for n in range(N)],
                               [slots[n] if n in kept else PAD_SLOT_ID for n in range(N)],
                               self.model.dispatcher.with_hook(self.on_dispatch))
        if res is None:
            return None
        first = {n: out.spec[n].rows[0] for n in kept}  # the item's first row among the step's records
        return {n: {layer: (st.recurrent[first[n]:first[n] + k], st.conv[first[n]:first[n] + k])
                    for layer, st in res.step_states.items()} for n, k in kept.items()}

    def _run_trees(self, sched: SchedulerOutput, first: int, errors: dict[int, str]) -> dict[int, TreeStep]:
        """Every item from ``first`` on verifies a draft tree: its root (the last committed token) and its
        nodes as one forward (:func:`kda_ref.engine.tree_verify.run_tree`), then acceptance. A failed
        verify fails that request alone."""
        trees = {}
        for n in range(first, len(sched.items)):
            it = sched.items[n]
            try:
                step = run_tree(self.model, self.pool, it.req, it.tree, self.on_dispatch)
                check_finite(step.rows)
                p = it.req.params
                step.result = accept_tree(step.root_logits, step.node_logits, it.tree, p.temperature, p.top_k,
                                          it.req.generator)
                trees[n] = step
            except Exception as err:  # noqa: BLE001 -- reported on that request, not raised
                errors[n] = f"tree verify failed: {err}"
        return trees

    def _run_cp(self, sched: SchedulerOutput, chunk_states: bool = False) -> ForwardOutput | None:
        """A context-parallel step (one item: the rest of a long prompt): the ``R`` ranks prefill it
        (:func:`kda_ref.parallel.context_parallel_prefill`, from the cached state on a prefix-cache hit)
        and their final states, conv windows and latent KV rows are installed in the request's slot
        and pages; the last token's logits come back. ``None`` when a rank failed or timed out: the
        runner then prefills the item itself (single process), warns (:class:`ContextParallelFallback`)
        and counts it (``cp_fallbacks``), and the engine carries on."""
        (it,) = sched.items
        req, t = it.req, self.pool.tensors
        tokens = req.all_token_ids[it.start:it.start + it.num_new_tokens]
        prefix = [self._prefix_state(req, it.start)] if it.start > 0 else None
        try:
            res = context_parallel_prefill(self.model, [tokens], world_size=self.cp["world_size"],
                                           backend=self.cp["backend"], timeout=self.cp["timeout"], prefix=prefix,
                                           chunk_states=chunk_states)
        except ContextParallelError as err:
            self.cp_counters["cp_fallbacks"] += 1
            self.cp_last_error = str(err)
            warnings.warn(f"context-parallel prefill of request {req.req_id} failed; prefilling it in one process: "
                          f"{err}", ContextParallelFallback, stacklevel=2)
            return None
        t.install_boundary(req.slot, req.pages, BoundaryState(
            recurrent={la: r[0] for la, r in res.recurrent.items()}, conv={la: c[0] for la, c in res.conv.items()},
            kv={la: rows[0] for la, rows in res.kv.items()}), start=it.start)
        self.cp_counters["cp_prefills"] += 1
        self.cp_counters["cp_sent_bytes"] += sum(res.sent_bytes)
        out = ForwardOutput(res.logits.to(self.device))
        for layer, per_seq in res.chunk_states.items():  # the chunk starts, as the chunk kernel reports them
            pos, rec, conv = per_seq[0]
            out.chunk_states[layer] = BoundaryStates(seq_ids=torch.tensor([0]), positions=[pos + it.start],
                                                     recurrent=rec, conv=conv)
        return out

    def _prefix_state(self, req, cached: int) -> PrefixState:
        """What the ranks start from when the first ``cached`` tokens of ``req`` are in its slot and pages
        (a prefix-cache hit): every KDA layer's state and conv window, every MLA layer's latent rows."""
        return self.pool.tensors.read_boundary(req.slot, req.pages, cached)

    def _run_static(self, sched: SchedulerOutput):
        """``(ForwardOutput, StaticStepInfo)`` when the step is all-decode or a uniform verify (the steps
        the model's fused decode / verify step would take: :meth:`ForwardBatch.is_decode_only`,
        :meth:`ForwardBatch.is_uniform_verify`, decided here from the scheduled items) and a static
        bucket holds it, else ``None``."""
        if self.static is None or not self.model.fused_steps_enabled(self.pool.tensors):
            return None
        items = sched.items
        L = uniform_length(items)  # 1: decode; 1 + k: every row verifies k drafts
        if L is None:
            return None
        rows = [[it.req.token_at(it.start), *it.drafts] for it in items]  # the last committed token, then drafts
        dispatcher = self.model.dispatcher.with_hook(self.on_dispatch)
        keep = None if L == 1 else self.record
        verify_slots = self._verify_slots(items, L) if keep is not None and keep.writes_slots else None
        return self.static.run(rows, [it.start for it in items], [it.req.slot for it in items],
                               [it.req.pages for it in items], dispatcher, keep, verify_slots)

    def _verify_slots(self, items, L: int) -> list[list[int]]:
        """The slots a ``spec_state="slots"`` verify step writes in place: each item's first ``L`` slots,
        checked to be its request's own (the write itself, inside the step, checks nothing)."""
        out = []
        for it in items:
            slots = it.req.spec_slots[:L]
            if len(slots) < L or any(self.pool.owner_of(PageKind.KDA_STATE, s) != it.req.req_id for s in slots):
                raise RuntimeError(f"spec_slots: request {it.req.req_id} holds {it.req.spec_slots}, not {L} state "
                                   f"slots of its own")
            out.append(slots)
        return out

    @staticmethod
    def _logit_rows(sched: SchedulerOutput, batch: ForwardBatch) -> torch.Tensor | str | None:
        """Packed rows whose logits are needed when the step verifies drafts: every row of a verify
        segment, the last row of every other sequence (None: the last rows only; "all": every row,
        when every sequence verifies)."""
        if not batch.verify_seqs:
            return None
        if len(batch.verify_seqs) == len(sched.items):
            return "all"
        offs = batch.cu_seqlens.tolist()
        rows = []
        for n, it in enumerate(sched.items):
            rows.extend(range(offs[n], offs[n + 1]) if it.drafts else [offs[n + 1] - 1])
        return torch.tensor(rows, dtype=torch.long, device=batch.cu_seqlens.device)

    @staticmethod
    def _accept(logits: torch.Tensor, it, greedy: tuple[list[int], list[int]] | None = None) -> AcceptResult:
        """How many of ``it``'s drafts the target accepts, from its verify rows ``logits [1 + k, vocab]``;
        ``greedy``: those rows' greedy tokens and finiteness flags when the step computed them."""
        p = it.req.params
        if greedy is not None and p.temperature == 0:
            tokens, finite = greedy
            if not all(finite):
                check_finite(logits)  # raises, naming how many logits are bad
            return accept_greedy_tokens(tokens, it.drafts)
        check_finite(logits)
        if p.temperature == 0:
            return accept_greedy(logits, it.drafts)
        return accept_rejection(logits, it.drafts, p.temperature, p.top_k, it.req.generator)


def uniform_length(items) -> int | None:
    """``L`` when every scheduled item runs ``L`` new tokens after a cached context, ``L - 1`` of them
    drafts -- an all-decode step (``L = 1``) or a uniform verify (the shapes of the model's fused steps,
    :attr:`ForwardBatch.is_decode_only` / :attr:`ForwardBatch.is_uniform_verify`); else ``None``."""
    L = items[0].num_new_tokens
    if any(it.start == 0 or it.num_new_tokens != L or len(it.drafts) != L - 1 for it in items):
        return None
    return L


class SamplingError(ValueError):
    """The logits or the distribution of one request cannot be sampled (NaN / inf)."""


class GreedyRows:
    """Greedy sampling of every row of ``logits [N, vocab]`` at once: one ``argmax`` and one finiteness
    check for the whole batch instead of a few small ops and host reads per request (vLLM's
    ``Sampler.greedy_sample`` in ``vllm/v1/sample/sampler.py``, commit ``00ec9781``, is the same one
    ``argmax(dim=-1)`` over the batch; vLLM has no per-row finiteness check there). :meth:`token` gives
    row ``n``'s token exactly as :func:`sample` with temperature 0 would, and raises the same
    :class:`SamplingError` for a row with a NaN or infinite logit. ``pre``: the two reductions' results
    ``[tokens, finite flags]`` when the step computed them (a static step does, inside its graph)."""

    def __init__(self, logits: torch.Tensor, pre: list[list[int]] | None = None):
        self._logits = logits
        if pre is not None:
            self._tokens, self._finite = pre
        else:
            self._finite = torch.isfinite(logits).all(dim=-1).tolist()  # [N]
            self._tokens = torch.argmax(logits, dim=-1).tolist()  # [N]

    def token(self, n: int) -> int:
        if not self._finite[n]:
            check_finite(self._logits[n])  # raises, naming how many logits are bad
        return self._tokens[n]


def check_finite(logits: torch.Tensor) -> None:
    """:class:`SamplingError` if any logit is NaN or infinite."""
    if not bool(torch.isfinite(logits).all()):
        bad = int((~torch.isfinite(logits)).sum())
        raise SamplingError(f"{bad} of {logits.numel()} logits are not finite (NaN or inf)")


def sample(logits: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator | None) -> int:
    """Greedy when ``temperature == 0``, else softmax sampling (optionally top-k) with ``generator``.

    Non-finite logits raise :class:`SamplingError` instead of returning an arbitrary token (``argmax``
    of a NaN row is index 0; ``multinomial`` of NaN probabilities raises deep inside torch)."""
    check_finite(logits)
    if temperature == 0:
        return int(torch.argmax(logits))
    scaled = logits / temperature
    if top_k > 0:
        kth = torch.topk(scaled, min(top_k, scaled.numel())).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if not bool(torch.isfinite(probs).all()):
        raise SamplingError(f"temperature {temperature!r} turns the logits into a non-finite distribution")
    return int(torch.multinomial(probs, 1, generator=generator))
