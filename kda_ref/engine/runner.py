"""``ModelRunner``: turns a scheduler decision into ONE varlen forward and samples the results.

Article concept ``varlen.metadata``: the batch is the packed new tokens of every scheduled request plus, per
request, ``cu_seqlens``, ``context_lens`` (tokens already cached), ``state_indices`` (its KDA state slot) and
``block_table`` (its MLA pages) — SGLang's ``ForwardBatch`` (0.5.23: ``ForwardBatch.init_new`` from the
``ScheduleBatch``; earlier through ``ScheduleBatch.get_model_worker_batch``), vLLM's
``GPUModelRunner._prepare_inputs``. :meth:`ModelRunner.run` (``LLM.step`` calls it, under ``torch.inference_mode``)
returns a frozen :class:`~kda_ref.engine.step_output.StepOutput`; with ``static_decode`` uniform steps go to their
bucket. The runner decides draft acceptance (:mod:`kda_ref.speculative.accept`); the scheduler commits. Design
notes: ``docs/architecture.md#the-model-runner``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from ..memory import PageKind, UnifiedMemoryPool
from ..model import ForwardBatch, HybridModel
from ..model.batch import PAD_SLOT_ID
from ..model.layer_state import PAD_PAGE
from ..model.layer_state import BoundaryState
from ..model.output import BoundaryStates, ForwardOutput
from ..model.verify_record import KEEP_STATES, VerifyRecord
from ..ops.dispatcher import KDAPhase, KernelChoice
from ..context_parallel import ContextParallelError, ContextParallelFallback, PrefixState, context_parallel_prefill
from ..speculative import AcceptResult, accept_greedy, accept_greedy_tokens, accept_rejection
from ..speculative.tree import accept_tree
from .sampling import GreedyRows, check_finite, record_prompt_logprobs, sample_token, wants_prompt_logprobs
from .scheduler import SchedulerOutput
from .static_decode import StaticDecode
from .step_output import SpecStep, StepOutput
from .tree_verify import TreeStep, run_tree

CP_KERNEL = "chunk_kda_context_parallel"  # what a context-parallel step's KDA layers ran, as the trace names it


class ModelRunner:
    def __init__(self, model: HybridModel, pool: UnifiedMemoryPool, on_dispatch=None, mixed_batch: str = "chunk",
                 record: VerifyRecord = KEEP_STATES, static: StaticDecode | None = None, cp: dict | None = None,
                 keep_hidden: bool = False):
        self.model = model
        # a drafter reads every committed row's hidden state (K3's MTP layer): else the last layer's MLP / MoE
        # runs on the rows whose logits the step samples from alone (HybridModel.forward_batch)
        self.keep_hidden = keep_hidden
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
        ids, cu, ctx, slots, max_pages = [], [0], [], [], 0
        for it in items:
            known = it.num_new_tokens - len(it.drafts)
            ids.extend(it.req.token_slice(it.start, it.start + known))
            ids.extend(it.drafts)  # a speculative item verifies its drafts after its last committed token
            cu.append(cu[-1] + it.num_new_tokens)
            ctx.append(it.start)
            slots.append(it.req.slot)
            max_pages = max(max_pages, len(it.req.pages))
        L = uniform_length(sched)
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
                             verify_seqs=tuple([n for n, it in enumerate(items) if it.drafts]) if sched.num_verifies else (),
                             verify_keep=self.record, verify_slots=verify_slots)
        return torch.tensor(ids, dtype=torch.long, device=dev), batch

    @torch.inference_mode()
    def run(self, sched: SchedulerOutput, return_chunk_states: bool = False) -> StepOutput:
        """Forward the scheduled tokens and sample where a request completes its known tokens; for a
        speculative item, decide how many drafts the target accepts. Four named parts: the draft-tree
        items set apart (each verifies in a forward of its own), one forward of the rest, sampling and
        acceptance item by item, then the trees."""
        main, first_tree = split_trees(sched)
        fwd, batch, static = self._forward(main, return_chunk_states)
        sampled = self._sample(main, fwd)
        trees = self._run_trees(sched, first_tree, sampled.errors) if sched.num_trees else {}
        return self._step_output(sched, main, fwd, batch, static, sampled, trees, return_chunk_states)

    def _forward(self, main: SchedulerOutput, return_chunk_states: bool):
        """``(ForwardOutput, ForwardBatch or None, StaticStepInfo or None)`` of the step's one forward: a
        static bucket's (no batch is built), a context-parallel prefill's, or the model's varlen forward.
        Its logits hold one row per item, and ``1 + k`` rows for an item that verifies ``k`` drafts."""
        if not main.items:  # every item verifies a tree: no other forward this step
            return ForwardOutput(torch.empty(0, self.model.config.vocab_size, device=self.device)), None, None
        ran = self._run_static(main)  # a static step needs only the host lists
        if ran is not None:
            return ran[0], None, ran[1]
        input_ids, batch = self.build_batch(main, return_chunk_states)
        if self.cp is not None and main.items[0].context_parallel:
            cp = self._run_cp(main, return_chunk_states)
            if cp is not None:
                return cp, batch, None
        rows = self._logit_rows(main, batch)
        fwd = self.model.forward_batch(input_ids, batch, self.pool.tensors, on_dispatch=self.on_dispatch,
                                       logits="last" if rows is None else rows, keep_hidden=self.keep_hidden)
        return fwd, batch, None

    def _sample(self, sched: SchedulerOutput, fwd: ForwardOutput) -> Sampled:
        """Each item's next token (or its drafts' acceptance), a failure kept on its item alone."""
        items, logits = sched.items, fwd.logits.float()
        verifies = sched.num_verifies > 0
        # a static step computed every row's greedy token and finiteness already: one host read
        pre = fwd.greedy.tolist() if fwd.greedy is not None else None  # [[token per row], [1 if finite]]
        greedy = None if verifies else GreedyRows(logits, pre)  # one argmax for every greedy decode row
        # spec_state="slots" through the fused verify step: the states went to the slots, none came back
        in_place = self.record.writes_slots and not fwd.step_states
        out = Sampled(logits=logits)
        at, step_row, last_rows = 0, 0, []  # next row of ``logits`` / of the verify segments' step states
        last_only = not verifies and not sched.num_prompt_logprobs  # one row per item: its last
        for n, it in enumerate(items):
            # 1 + k for a verify, a chunk's for prompt logprobs
            rows = range(at, at + 1) if last_only else range(at, at + self.logit_rows_of(it))
            at, tok = rows.stop, None
            last_rows.append(rows.stop - 1)
            try:  # one request's bad logits or sampling parameters must not stop the others
                if it.drafts:
                    pre_rows = None if pre is None else (pre[0][rows.start:rows.stop], pre[1][rows.start:rows.stop])
                    step = self._verify(it, logits[rows.start:rows.stop], pre_rows, step_row, in_place)
                    out.spec[n], tok = step, step.result.next_token
                else:
                    if not last_only:
                        record_prompt_logprobs(it, logits[rows.start:rows.stop])
                    tok = self._next_token(it, logits[rows.stop - 1], greedy, rows.stop - 1) if it.completes else None
            except Exception as err:  # noqa: BLE001 -- reported on that request, not raised
                out.errors[n] = f"sampling failed: {err}"
            step_row += len(rows) if it.drafts else 0
            out.tokens.append(tok)
        if at != len(items):  # the last row of every item: the logits that produced its next token
            out.logits = logits[last_rows]
        return out

    @staticmethod
    def _next_token(it, logits: torch.Tensor, greedy: GreedyRows | None, row: int) -> int:
        """An item's next token from its row ``logits [vocab]``: the batch's one argmax for plain greedy
        decoding, else the request's own sampling (penalties, temperature, the filters)."""
        p, req = it.req.params, it.req
        if greedy is not None and p.temperature == 0 and not p.penalized:
            return greedy.token(row)
        return sample_token(logits, p, req.prompt_token_ids, req.output_token_ids, req.generator)

    @staticmethod
    def logit_rows_of(it) -> int:
        """The logit rows item ``it`` needs: ``1 + k`` for a verify of ``k`` drafts, every row of its chunk for
        a prompt chunk whose logprobs were asked for (:func:`record_prompt_logprobs`), else its last one."""
        if it.drafts:
            return 1 + len(it.drafts)
        return it.num_new_tokens if wants_prompt_logprobs(it) else 1

    def _verify(self, it, logits: torch.Tensor, pre_rows, step_row: int, in_place: bool) -> SpecStep:
        """A verify item's acceptance and where its per-token states are (rows of the step states, or
        the request's slots the fused step wrote them into)."""
        res = self._accept(logits, it, pre_rows)
        nrows = logits.shape[0]
        return SpecStep(res, logits, list(range(step_row, step_row + nrows)), it.start,
                        slots=it.req.spec_slots[:nrows] if in_place else None)

    def _step_output(self, sched, main, fwd: ForwardOutput, batch, static, sampled: Sampled, trees,
                     return_chunk_states: bool) -> StepOutput:
        """The step's :class:`StepOutput`: the tree items' root logits after the others', the batch (built
        on demand for a static or tree step: only the tracer reads it), ReplaySSM's fold of a static verify."""
        logits, tokens = sampled.logits, sampled.tokens
        if len(main.items) < len(sched.items):  # the root logits of the tree items (zeros where one failed)
            roots = [trees[n].root_logits if n in trees else logits.new_zeros(logits.shape[-1])
                     for n in range(len(main.items), len(sched.items))]
            logits, tokens = torch.cat([logits, torch.stack(roots)]), tokens + [None] * len(roots)
        made = (lambda: batch) if main is sched and batch is not None else \
            (lambda: self.build_batch(sched, return_chunk_states)[1])
        fold = None
        if static is not None and fwd.trajectories:  # a static verify that kept records: commit as one bucket step
            fold = self.fold_records(fwd.trajectories, {n: s.rows[0] for n, s in sampled.spec.items()},
                                    len(main.items))
        return StepOutput(logits=logits, token_ids=tokens, make_batch=made, chunk_states=fwd.chunk_states,
                          errors=sampled.errors, spec=sampled.spec, step_states=fwd.step_states,
                          trajectories=fwd.trajectories, static=static, tree=trees, fold=fold,
                          hidden=fwd.hidden)

    def fold_records(self, trajectories: dict, first_rows: dict[int, int], num_rows: int):
        """The commit after a static verify step that kept per-token records (ReplaySSM's inputs, RecoverSSM's
        corrections), as the step output's ``fold(kept, slots)``: item
        ``n`` folds its ``kept[n]`` tokens into ``slots[n]`` (an item not in ``kept`` -- it failed --
        folds nothing), all as one bucket step of the verify's shape
        (:meth:`kda_ref.engine.static_decode.StaticDecode.fold`, which writes the slots). ``fold``
        returns each item's ``{layer: (states, windows)}`` after its kept tokens, or ``None`` when no
        bucket holds the step; :func:`kda_ref.speculative.strategy.commit_recomputed` calls it."""
        def fold(kept: dict[int, int], slots: dict[int, int]) -> dict | None:
            res = self.static.fold(trajectories, [kept.get(n, 0) for n in range(num_rows)],
                                   [slots[n] if n in kept else PAD_SLOT_ID for n in range(num_rows)],
                                   self.model.dispatcher.with_hook(self.on_dispatch))
            if res is None:
                return None
            first = first_rows  # the item's first row among the step's records
            return {n: {layer: (st.recurrent[first[n]:first[n] + k], st.conv[first[n]:first[n] + k])
                        for layer, st in res.step_states.items()} for n, k in kept.items()}
        return fold

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
        (:func:`kda_ref.context_parallel.context_parallel_prefill`, from the cached state on a prefix-cache hit)
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
        self._note_cp_dispatch(len(tokens))
        out = ForwardOutput(res.logits.to(self.device))
        for layer, per_seq in res.chunk_states.items():  # the chunk starts, as the chunk kernel reports them
            pos, rec, conv = per_seq[0]
            out.chunk_states[layer] = BoundaryStates(seq_ids=torch.tensor([0]), positions=[pos + it.start],
                                                     recurrent=rec, conv=conv)
        return out

    def _note_cp_dispatch(self, num_tokens: int) -> None:
        """The trace hook told what each KDA layer ran in a context-parallel step: the ranks' chunk form over
        the item's tokens (:data:`CP_KERNEL`; the ranks' own dispatchers have no hook). ``_run_cp`` calls it."""
        if self.on_dispatch is None:
            return
        for layer in self.model.config.kda_layer_ids:
            self.on_dispatch(KernelChoice(phase=KDAPhase.EXTEND, backend=self.cp["backend"], kernel=CP_KERNEL,
                                          layer=layer, num_seqs=1, num_tokens=num_tokens))

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
        L = uniform_length(sched)  # 1: decode; 1 + k: every row verifies k drafts
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
        if not batch.verify_seqs and not sched.num_prompt_logprobs:
            return None
        if len(batch.verify_seqs) == len(sched.items):
            return "all"
        offs = batch.cu_seqlens.tolist()
        rows = []
        for n, it in enumerate(sched.items):
            rows.extend(range(offs[n + 1] - ModelRunner.logit_rows_of(it), offs[n + 1]))
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


def uniform_length(sched: SchedulerOutput) -> int | None:
    """``L`` when every scheduled item runs ``L`` new tokens after a cached context, ``L - 1`` of them
    drafts -- an all-decode step (``L = 1``) or a uniform verify (the shapes of the model's fused steps,
    :attr:`ForwardBatch.is_decode_only` / :attr:`ForwardBatch.is_uniform_verify`); else ``None``."""
    if sched.is_decode_only:
        return 1
    items = sched.items
    if sched.num_verifies != len(items):
        return None
    L = items[0].num_new_tokens
    if any([it.start == 0 or it.num_new_tokens != L or len(it.drafts) != L - 1 for it in items]):
        return None
    return L


def split_trees(sched: SchedulerOutput) -> tuple[SchedulerOutput, int]:
    """``(main, first)``: items with a draft tree come last (the scheduler orders them so) and run in
    forwards of their own; ``main`` is the rest of the step, ``first`` the index of the first tree item."""
    first = len(sched.items) - sched.num_trees
    if not sched.num_trees:
        return sched, first
    assert all(it.tree is not None for it in sched.items[first:]), "tree items must come last"
    main = SchedulerOutput(token_budget=sched.token_budget)
    for it in sched.items[:first]:
        main.take(it)
    return main, first


@dataclass
class Sampled:
    """What sampling one forward's items gave: a token per item (``None`` where it does not complete or
    failed), the verify results, the failures, and the logits that produced each next token."""

    logits: torch.Tensor
    tokens: list[int | None] = field(default_factory=list)
    spec: dict[int, SpecStep] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
