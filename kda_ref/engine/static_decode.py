"""Static-shape decode: fixed, preallocated metadata per bucket, PAD rows, CUDA-graph capture on GPUs.

Article concept ``static.pad_rows`` (``docs/article.md#s0``, the summary table's CUDA-graph row). An all-decode
step of ``n`` rows (or a uniform verify step, buckets ``(bs, L = 1 + k)``) runs as the smallest bucket
``bs >= n``: its metadata copied into the bucket's preallocated tensors, the ``bs - n`` tail rows PAD rows
(:mod:`kda_ref.ops.pad_rows`); other steps run dynamically. A bucket's step is captured as a CUDA graph on
CUDA (:mod:`kda_ref.engine.graphs`), compiled with ``compile=True``, else run eagerly. Counterparts: vLLM's
``cudagraph_capture_sizes`` (``vllm/config/compilation.py``); SGLang's ``MambaAttnBackendBase.init_cuda_graph_state``,
``_replay_metadata``, ``cuda_graph_runner.py``. Design notes: ``docs/spec_decode.md#static-shape-decode``,
``docs/architecture.md#static-buckets-and-cuda-graphs``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..model import HybridModel
from ..model.batch import PAD_SLOT_ID, DecodePlan
from ..model.output import BoundaryStates, ForwardOutput, Trajectory
from ..model.verify_record import VerifyRecord
from ..model.layer_state import HybridCacheTensors
from ..ops.pad_rows import gather_rows, write_rows
from ..utils.compiling import COMPILE_OPTIONS, compile_and_run  # noqa: F401 -- COMPILE_OPTIONS: tests read it here
from ..speculative.recoverssm import recover_kept
from ..speculative.replay import fold_conv_kept, fold_kept
from ..utils import cdiv
from .graphs import CudaGraphs, EmulatedGraphs



def cpp_compiler() -> str | None:
    """The path of the C++ compiler inductor would call on the CPU -- its ``config.cpp.cxx``: ``$CXX``, else
    ``g++`` on Linux -- or ``None`` when that one is not installed."""
    from torch._inductor import config

    for name in reversed(config.cpp.cxx):  # (None, "$CXX or g++"): the last name set is the one tried
        if name:
            return shutil.which(name)
    return None


def capture_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """The bucket sizes for ``max_num_seqs``: ``1, 2, 4, 8, 16, ..., 248, 256, 272, ...`` up to it, and it."""
    sizes = [s for s in [1, 2, 4, *range(8, 256, 8), *range(256, max_num_seqs + 1, 16)] if s <= max_num_seqs]
    if not sizes or sizes[-1] != max_num_seqs:
        sizes.append(max_num_seqs)
    return tuple(sizes)


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


@dataclass
class DecodeBucket:
    """One bucket's preallocated metadata (``bs`` rows of ``tokens`` tokens, ``pages`` pages per row) and,
    on CUDA, its graph."""

    bs: int
    pages: int
    tokens: int  # tokens per row: 1 (decode) or 1 + k (verify)
    kind: str  # "decode" | "verify" | "fold" (the commit after a verify that kept records: StaticDecode.fold)
    keep: VerifyRecord | None  # a verify bucket's record (kda_ref.model.verify_record); None for the others
    input_ids: torch.Tensor  # [bs * tokens] the tokens of every row (PAD rows: 0), a view of ``meta``
    plan: DecodePlan  # the plan every step of this bucket runs with: views of fixed tensors
    meta: torch.Tensor  # [2 * bs * tokens + 2 * bs + bs * pages (+ bs * tokens: slots)] int64: ids and indices, packed
    graph: object | None = None  # once captured: a torch.cuda.CUDAGraph (or its emulation, kda_ref.engine.graphs)
    compiled: Callable[[], ForwardOutput] | None = None  # torch.compile'd step (StaticDecode(compile=True))
    compile_s: float = 0.0  # seconds its compilation took
    compile_failed: bool = False  # compilation raised: the bucket runs eagerly
    output: ForwardOutput | None = None  # the captured output buffers
    dispatches: list = field(default_factory=list)  # kernel choices recorded at capture, re-emitted per replay
    runs: int = 0
    fold_inputs: dict = field(default_factory=dict)  # a fold bucket: KDA layer -> {record field: [bs * L, ...]}


@dataclass
class StaticStepInfo:
    """What one static step ran: for the trace's graph-bucket event and the page's PAD-row view."""

    bucket: int  # rows of the bucket
    num_seqs: int  # live rows (the rest are PAD)
    tokens: int  # tokens per row (1: decode; 1 + k: verify)
    pages: int  # pages per row the bucket reads
    mode: str  # "cuda_graph" | "emulated_graph" | "compiled" | "eager" (a compiled bucket's first step runs eagerly)
    captured: bool  # the bucket's graph was captured (CUDA) or its step compiled (compile=True) in this step
    state_indices: list[int]  # [bucket], PAD rows -1
    context_lens: list[int]  # [bucket]
    block_table: list[list[int]]  # [bucket, pages], -1 where a row has no page


class StaticDecode:
    """Runs all-decode and uniform verify steps over per-bucket fixed buffers (see the module docstring)."""

    def __init__(self, model: HybridModel, cache: HybridCacheTensors, max_num_seqs: int, max_model_len: int,
                 capture: bool | None = None, compile: bool = False,
                 graphs: CudaGraphs | EmulatedGraphs | None = None, keep_hidden: bool = False, gemm: bool = False):
        """``capture``: record each bucket's step in a CUDA graph (default: on a CUDA device). ``graphs``:
        capture with this graph API instead (:class:`~kda_ref.engine.graphs.EmulatedGraphs` keeps CUDA
        graphs' rules on any device, which is how the capture path is tested without a GPU).
        ``keep_hidden``: the decode and verify buckets also return the pre-norm hidden rows (one more output
        buffer per step), for a drafter that reads them (the MTP drafter's ``needs_hidden``). ``gemm``: compile
        with inductor's C++ GEMM template over frozen weights (``LLM(compile_gemm=True)``; CPU only)."""
        self.model, self.cache = model, cache
        self.compile, self.keep_hidden, self.gemm = compile, keep_hidden, gemm
        self.sizes = capture_sizes(max_num_seqs)
        self.page_size = cache.page_size
        self.max_pages = cdiv(max_model_len, cache.page_size)
        self.device = cache.recurrent.device
        if graphs is None:
            if capture is None:
                capture = self.device.type == "cuda"
            if capture and self.device.type != "cuda":
                raise ValueError(f"capture: CUDA graphs need a CUDA device, the cache is on {self.device}")
            graphs = CudaGraphs() if capture else None
        elif capture is False:
            raise ValueError("capture=False contradicts graphs=: a graph API was given to capture with")
        self.graphs = graphs
        self.capture = graphs is not None
        if gemm and self.device.type != "cpu":
            raise ValueError(f"compile_gemm: inductor's C++ GEMM template runs on the CPU, the cache is on {self.device}")
        self.buckets: dict[tuple, DecodeBucket] = {}
        cache.zero_pad_units()  # what PAD rows read

    # ---- buckets -------------------------------------------------------------------------------------
    def bucket_shape(self, num_seqs: int, max_context: int, tokens: int = 1) -> tuple[int, int] | None:
        """``(bs, pages)`` for a step of ``num_seqs`` rows of ``tokens`` new tokens whose longest cached
        context is ``max_context`` tokens; ``None`` when no bucket holds it (the step runs dynamically)."""
        need = (max_context + tokens - 1) // self.page_size + 1  # pages holding the cached and the new tokens
        if num_seqs > self.sizes[-1] or need > self.max_pages:
            return None
        bs = next(s for s in self.sizes if s >= num_seqs)
        return bs, min(_pow2_at_least(need), self.max_pages)

    def _new_bucket(self, bs: int, pages: int, tokens: int, keep: VerifyRecord | None) -> DecodeBucket:
        dev, T = self.device, bs * tokens
        # every integer a step copies in, packed in one buffer: input_ids [T] | context_lens [bs] |
        # state_indices [bs] | kv_write [T] | block_table [bs * pages] | verify_slots [T] (a slots record) --
        # one host tensor and one copy per step
        vs = T if keep is not None and keep.writes_slots else 0
        meta = torch.zeros(2 * T + 2 * bs + bs * pages + vs, dtype=torch.long, device=dev)
        input_ids, ctx, slots, write, table, verify_slots = meta.split([T, bs, bs, T, bs * pages, vs])
        table = table.view(bs, pages)  # [bs, pages]
        plan = DecodePlan(
            cu_seqlens=torch.arange(0, T + 1, tokens, device=dev), state_indices=slots, kv_write=write,
            # the masks and lengths are derived inside each step from context_lens (_with_masks): empty here,
            # so that running this plan without them fails instead of attending to every position
            kv_pages=table, kv_bias=torch.empty(0, device=dev), kv_pad=torch.empty(0, dtype=torch.bool, device=dev),
            kv_lens=torch.empty(0, dtype=torch.long, device=dev),
            block_table=table, pad=True, tokens=tokens, context_lens=ctx, verify_slots=verify_slots if vs else None)
        return DecodeBucket(bs=bs, pages=pages, tokens=tokens, kind="decode" if keep is None else "verify", keep=keep,
                            plan=plan, input_ids=input_ids, meta=meta)

    def _fill(self, b: DecodeBucket, rows: list[list[int]], context_lens: list[int], slots: list[int],
              tables: list[list[int]], verify_slots: list[list[int]] | None = None) -> tuple[list[int], list[int], list[list[int]]]:
        """Copy one step's metadata into the bucket's buffer in place (what a graph replay reads): one host
        tensor, one copy. The attention masks are derived from it inside the step (:func:`_with_masks`).
        Returns the bucket's ``(state_indices, context_lens, block_table)`` as lists, PAD rows included."""
        pad, ps, L, P = b.bs - len(rows), self.page_size, b.tokens, b.pages
        table = [t[:P] + [PAD_SLOT_ID] * (P - len(t)) if len(t) < P else t[:P] for t in tables]
        table += [[PAD_SLOT_ID] * P] * pad  # [bs, pages]
        ctx = context_lens + [0] * pad
        state = slots + [PAD_SLOT_ID] * pad
        write = [tables[i][(c + t) // ps] * ps + (c + t) % ps for i, c in enumerate(context_lens) for t in range(L)]
        packed = [x for r in rows for x in r] + [0] * (L * pad)  # input_ids
        packed += ctx + state + write + [PAD_SLOT_ID] * (L * pad)
        for t in table:
            packed += t
        if b.keep is not None and b.keep.writes_slots:  # the slot of every verified token's state; PAD rows' go to the PAD unit
            packed += [s for r in verify_slots for s in r] + [PAD_SLOT_ID] * (L * pad)
        b.meta.copy_(torch.tensor(packed, dtype=torch.long))
        return state, ctx, table

    # ---- one step ------------------------------------------------------------------------------------
    def run(self, rows: list[list[int]], context_lens: list[int], slots: list[int], tables: list[list[int]],
            dispatcher, keep: VerifyRecord | None = None,
            verify_slots: list[list[int]] | None = None) -> tuple[ForwardOutput, StaticStepInfo] | None:
        """One all-decode step (``rows`` of one token each, ``keep=None``: the logits ``[n, vocab]``) or
        one uniform verify step (``rows`` of ``L`` tokens, ``keep`` a :class:`~kda_ref.model.verify_record.VerifyRecord`,
        one that writes slots with ``verify_slots``, each row's ``L`` slots the states are written into: the logits
        ``[n * L, vocab]`` and the live rows' records), run as its bucket, with what ran; ``None`` when
        no bucket holds the step."""
        L, n = len(rows[0]), len(rows)
        shape = self.bucket_shape(n, max(context_lens), L)
        if shape is None:
            return None
        key = (*shape, L, keep)  # the record object itself (frozen): two records never share a bucket
        b = self.buckets.get(key)
        if b is None:
            b = self.buckets[key] = self._new_bucket(*shape, L, keep)
        state, ctx, table = self._fill(b, rows, context_lens, slots, tables, verify_slots)
        out, mode, captured = self._execute(b, dispatcher, n, L)
        info = StaticStepInfo(bucket=b.bs, num_seqs=n, tokens=L, pages=b.pages, mode=mode, captured=captured,
                              state_indices=state, context_lens=ctx, block_table=table)
        return out, info

    def fold(self, trajectories: dict[int, Trajectory], kept: list[int], slots: list[int], dispatcher) -> ForwardOutput | None:
        """The commit after a uniform verify step that kept per-token records, as a bucket step of the same
        fixed shapes: ReplaySSM's inputs folded through the recurrence again
        (:func:`kda_ref.speculative.replay.fold_kept`), RecoverSSM's corrections summed in closed form
        (:func:`kda_ref.speculative.recoverssm.recover_kept`). Row ``n`` folds its first ``kept[n]`` records
        (``trajectories``: the verify's live rows, ``[n * L, ...]`` per KDA layer) into the state and conv
        window of ``slots[n]``, written in place (``kept[n] = 0``, slot ``-1``: a row that folds nothing).
        Returns the states and windows after every record of the live rows (``step_states``, ``[n * L,
        ...]`` per layer: the prefix cache takes the kept ones); ``None`` when no bucket holds ``n`` rows."""
        n = len(kept)
        L = next(iter(trajectories.values())).k.shape[0] // n
        if n > self.sizes[-1]:
            return None
        bs = next(s for s in self.sizes if s >= n)
        key = (bs, 0, L, "fold")
        b = self.buckets.get(key)
        if b is None:
            b = self.buckets[key] = self._new_fold_bucket(bs, L, trajectories)
        pad = bs - n
        b.meta.copy_(torch.tensor(slots + [PAD_SLOT_ID] * pad + kept + [0] * pad, dtype=torch.long))
        # the records into the bucket's fixed inputs; PAD rows keep whatever an earlier step left there (kept 0,
        # slot -1: they fold nothing and write nothing)
        for layer, tr in trajectories.items():
            for name, dst in b.fold_inputs[layer].items():
                dst[:n * L].copy_(getattr(tr, name))
        out, _, _ = self._execute(b, dispatcher, n, L)
        return out

    def _new_fold_bucket(self, bs: int, L: int, trajectories: dict[int, Trajectory]) -> DecodeBucket:
        dev = self.device
        meta = torch.zeros(2 * bs, dtype=torch.long, device=dev)  # state_indices [bs] | kept [bs]
        slots = meta[:bs]
        empty = torch.empty(0, dtype=torch.long, device=dev)
        plan = DecodePlan(cu_seqlens=torch.arange(0, bs * L + 1, L, device=dev), state_indices=slots, kv_write=empty,
                          kv_pages=empty.view(bs, 0), kv_bias=torch.empty(0, device=dev),
                          kv_pad=torch.empty(0, dtype=torch.bool, device=dev), kv_lens=empty,
                          block_table=empty.view(bs, 0), pad=True, tokens=L)
        b = DecodeBucket(bs=bs, pages=0, tokens=L, kind="fold", keep=None, input_ids=empty, plan=plan, meta=meta)
        b.fold_inputs = {layer: {name: torch.zeros(bs * L, *getattr(tr, name).shape[1:], dtype=getattr(tr, name).dtype,
                                                   device=dev)
                                 for name in Trajectory.FIELDS if getattr(tr, name) is not None}
                         for layer, tr in trajectories.items()}
        return b

    def _execute(self, b: DecodeBucket, dispatcher, n: int, L: int) -> tuple[ForwardOutput, str, bool]:
        """Run bucket ``b``'s step on the metadata just filled in: replayed as a graph, compiled or eager.
        Returns the live rows' output, the mode and whether the bucket was captured or compiled now."""
        captured = False
        if self.capture:
            if b.graph is None:
                self._capture(b, dispatcher)
                captured = True
            b.graph.replay()
            self._replay_dispatches(b, dispatcher)
            out = _live(b.output, n, L, clone=True)  # the next replay overwrites the graph's output buffers
            mode = self.graphs.mode
        elif self.compile and b.runs > 0 and not b.compile_failed:
            # the bucket's first run recorded its dispatches and built the fused weights; its second compiles it
            if b.compiled is None:
                full = self._compile(b, dispatcher)
                captured = full is not None
            else:
                full = b.compiled()
            if full is None:  # compilation failed: this step and the bucket's later ones run eagerly
                out, mode = _live(self._step(b, dispatcher), n, L, clone=False), "eager"
            else:
                out, mode = _live(full, n, L, clone=False), "compiled"
                self._replay_dispatches(b, dispatcher)
        elif self.compile and b.runs == 0:
            record: list = []
            out = _live(self._step(b, dispatcher.with_hook(_tee(dispatcher.on_dispatch, record))), n, L, clone=False)
            b.dispatches = record  # kept only once the step ran whole
            mode = "eager"
        else:
            out = _live(self._step(b, dispatcher), n, L, clone=False)
            mode = "eager"
        b.runs += 1
        return out, mode, captured

    def _step(self, b: DecodeBucket, dispatcher) -> ForwardOutput:
        """The bucket's fixed-shape step: no host synchronisation, no data-dependent shape."""
        if b.kind == "fold":
            return self._fold_step(b)
        plan = _with_masks(b.plan, self.page_size)
        if b.kind == "decode":
            hidden = self.model.decode_hidden(b.input_ids, plan, self.cache, dispatcher)  # [bs, d], pre-norm
            out = ForwardOutput(self.model.final_logits(hidden), hidden=hidden)
        else:
            out = self.model.verify_step(b.input_ids, plan, self.cache, b.keep, dispatcher)
        if not self.keep_hidden:  # no output buffer (nor a copy per replay) nobody reads
            out.hidden = None
        # greedy sampling's two reductions inside the step (fused when compiled): one host read per step after it
        out.greedy = torch.stack([out.logits.argmax(dim=-1), torch.isfinite(out.logits).all(dim=-1).long()])
        return out

    def _fold_step(self, b: DecodeBucket) -> ForwardOutput:
        """A fold bucket's step (:meth:`fold`): every KDA layer's records folded into the rows' slots; no
        logits (``[bs * L, 0]``), the states and windows after every record as ``step_states``."""
        c, bs, L = self.cache, b.bs, b.tokens
        slots, kept = b.meta.split([bs, bs])  # what fold() filled in
        out = ForwardOutput(logits=torch.empty(bs * L, 0, device=self.device))
        rows = torch.arange(bs, device=self.device)
        per_row = lambda t: t.view(bs, L, *t.shape[1:])  # noqa: E731  [bs * L, ...] -> [bs, L, ...]
        for layer, rec in b.fold_inputs.items():
            li = c.kda_index[layer]
            r = {name: per_row(t) for name, t in rec.items()}
            state0 = gather_rows(c.recurrent[li], slots)
            if "u" in r:  # RecoverSSM's corrections: the closed form
                state, steps = recover_kept(state0, r["k"], r["g"], r["u"], kept)
            else:  # ReplaySSM's inputs: the recurrence again
                state, steps = fold_kept(state0, r["k"], r["v"], r["g"], r["beta"], kept)
            window, windows = fold_conv_kept(gather_rows(c.conv[li], slots), r["x"], kept)
            write_rows(c.recurrent[li], slots, state, pad=True)  # a PAD row (slot -1) writes nothing
            write_rows(c.conv[li], slots, window, pad=True)
            out.step_states[layer] = BoundaryStates(seq_ids=rows, positions=[], recurrent=steps.reshape(bs * L, *steps.shape[2:]),
                                                    conv=windows.reshape(bs * L, *windows.shape[2:]))
        return out

    @staticmethod
    def _replay_dispatches(b: DecodeBucket, dispatcher) -> None:
        """Re-emit the kernel choices recorded for the bucket: a replayed graph or a compiled step calls
        no Python hook."""
        if dispatcher.on_dispatch is not None:
            for choice in b.dispatches:
                dispatcher.on_dispatch(choice)

    def _compile(self, b: DecodeBucket, dispatcher) -> ForwardOutput | None:
        """``torch.compile`` the bucket's step (inductor, one fixed-shape graph, no trace hook: the recorded
        dispatches are re-emitted instead) and run it once on this step's metadata, which compiles it:
        returns that step's output (:func:`~kda_ref.utils.compiling.compile_and_run`). If compilation fails
        (raised before the graph runs: the compiler traces fake tensors) returns ``None`` and the bucket runs
        eagerly from now on, with a warning; an error while the compiled graph runs propagates like an eager step's."""
        quiet = dispatcher.with_hook(None)
        what = {"decode": "decode", "fold": f"replay fold ({b.tokens} records per row)"}.get(
            b.kind, f"verify ({b.tokens} tokens per row)")
        # every bucket (of every engine) compiles the same code; isolated, a bucket's graph is looked up
        # among its own entries and dynamo's recompilation limit (8 per code object) counts per bucket
        out, step, b.compile_s = compile_and_run(lambda: self._step(b, quiet), (),
                                                 f"the static {what} step of bucket bs={b.bs} pages={b.pages}",
                                                 gemm=self.gemm)
        b.compiled, b.compile_failed = step, step is None
        return out

    def _capture(self, b: DecodeBucket, dispatcher) -> None:
        """Record the bucket's step in a graph (:mod:`kda_ref.engine.graphs`: CUDA's, or its emulation),
        after a warm-up run on a side stream. Capture only records; the warm-up runs the step on the
        bucket's live metadata, so the states and KV rows it advanced are put back before the replay
        runs it. The kernel dispatches are recorded once (a replay runs no Python) and re-emitted per
        replay. With ``compile=True`` the warm-up runs eagerly (recording the dispatches), a second
        warm-up compiles the step, and the graph captures the compiled step."""
        p, c = b.plan, self.cache
        written = p.state_indices if p.verify_slots is None else torch.cat([p.state_indices, p.verify_slots])
        slots = written[written >= 0].unique()  # every slot the step reads or writes (a slots record: its verify slots)
        rows = p.kv_write[p.kv_write >= 0]
        kv_rows = c.kv.view(c.kv.shape[0], -1, c.kv.shape[-1])  # [L_mla, pages * page_size, Dc+Dp]
        saved = (c.recurrent[:, slots].clone(), c.conv[:, slots].clone(), kv_rows[:, rows].clone())
        b.dispatches.clear()

        def put_back() -> None:
            c.recurrent[:, slots], c.conv[:, slots], kv_rows[:, rows] = saved

        with self.graphs.warmup():
            self._step(b, dispatcher.with_hook(b.dispatches.append))  # recorded once: a replay runs no Python
        put_back()
        if self.compile:
            with self.graphs.warmup():
                self._compile(b, dispatcher)  # a failure leaves b.compiled None: the eager step is captured
            put_back()
        if b.compiled is not None:
            step = b.compiled
        else:
            quiet = dispatcher.with_hook(None)  # the dispatches were recorded by the warm-up
            step = lambda: self._step(b, quiet)  # noqa: E731
        b.graph, b.output = self.graphs.capture(step, (c.recurrent, c.conv, c.kv))


def _with_masks(plan: DecodePlan, page_size: int) -> DecodePlan:
    """``plan`` with its attention masks and lengths derived from its ``context_lens`` and ``state_indices``,
    as tensor ops inside the step (fused by the compiler, captured in a CUDA graph) instead of host work
    per step: ``kv_bias [bs, L, Lk]`` is ``-inf`` past each new token's position, ``kv_pad [bs, Lk, 1]``
    marks the rows past a row's last new token (never written: zeroed) and every row of a PAD row (state
    index -1: it reads only zeros), ``kv_lens = context_lens + L`` (a PAD row attends to its ``L`` zero
    positions; SGLang's seq-len fill value for padding is ``1``)."""
    ctx, L = plan.context_lens, plan.tokens
    bs, Lk = plan.kv_pages.shape[0], plan.kv_pages.shape[1] * page_size
    tok = ctx[:, None] + torch.arange(L, device=ctx.device)  # [bs, L] position of every new token
    masked = torch.arange(Lk, device=ctx.device)[None, None, :] > tok[:, :, None]  # [bs, L, Lk]: after the token
    bias = torch.zeros(bs, L, Lk, device=ctx.device).masked_fill(masked, float("-inf"))
    never = masked[:, -1, :] | (plan.state_indices < 0)[:, None]  # [bs, Lk]
    return DecodePlan(cu_seqlens=plan.cu_seqlens, state_indices=plan.state_indices, kv_write=plan.kv_write,
                      kv_pages=plan.kv_pages, kv_bias=bias, kv_pad=never[:, :, None], kv_lens=ctx + L,
                      block_table=plan.block_table, slot_range=plan.slot_range, pad=plan.pad, tokens=L,
                      context_lens=ctx, verify_slots=plan.verify_slots)


def _tee(hook: Callable | None, record: list) -> Callable:
    """A dispatch hook that appends each choice to ``record`` and passes it on to ``hook``."""
    def both(choice) -> None:
        record.append(choice)
        if hook is not None:
            hook(choice)
    return both


def _live(out: ForwardOutput, n: int, L: int, clone: bool) -> ForwardOutput:
    """The live rows of a bucket's output: the first ``n`` sequences (``n * L`` token rows); ``out`` itself
    when every row is live and nothing needs copying."""
    if not clone and out.logits.shape[0] == n * L:
        return out
    cut = (lambda t: t[:n * L].clone()) if clone else (lambda t: t[:n * L])  # noqa: E731
    greedy = None if out.greedy is None else (out.greedy[:, :n * L].clone() if clone else out.greedy[:, :n * L])
    live = ForwardOutput(cut(out.logits), greedy=greedy, hidden=None if out.hidden is None else cut(out.hidden))
    for layer, st in out.step_states.items():
        positions = [p.clone() for p in st.positions[:n]] if clone else st.positions[:n]
        live.step_states[layer] = BoundaryStates(seq_ids=st.seq_ids[:n], positions=positions,
                                                 recurrent=cut(st.recurrent), conv=cut(st.conv))
    for layer, tr in out.trajectories.items():
        live.trajectories[layer] = tr.map(cut, seq_ids=tr.seq_ids[:n])
    return live
