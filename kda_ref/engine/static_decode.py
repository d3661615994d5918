"""Static-shape decode: fixed, preallocated metadata per bucket, PAD rows, CUDA-graph capture on GPUs.

Article concept ``static.pad_rows`` (``docs/article.md#s0``, the summary table's CUDA-graph row). A
CUDA graph replays the kernels it recorded with the buffers it recorded, so a decode step whose batch
size changes every step is run as the smallest captured *bucket* ``bs >= n``: the step's metadata is
copied into that bucket's preallocated tensors and the ``bs - n`` tail rows are PAD rows.

* Buckets: ``1, 2, 4``, then multiples of 8, then of 16 past 256, up to ``max_num_seqs`` -- the shape
  of vLLM's default ``cudagraph_capture_sizes`` (``vllm/config/compilation.py``, ``CompilationConfig``)
  -- plus ``max_num_seqs`` itself. SGLang keeps per-bs metadata the same way
  (``MambaAttnBackendBase.init_cuda_graph_state``: ``state_indices_list[bs - 1]``,
  ``query_start_loc_list[bs - 1]``). Steps with more rows than the largest bucket run dynamically.
* PAD rows (SGLang ``_replay_metadata``): state index ``PAD_SLOT_ID = -1``, KV write row ``-1``, block
  table ``-1``, context length ``0`` and one attended position (SGLang's seq-len fill value is ``1``):
  they read zeros and write nothing (:mod:`kda_ref.ops.pad_rows`), and their logits are dropped.
* The torch attention of this engine reads whole pages (a GPU paged kernel stops at each row's
  length), so a bucket also fixes the number of pages it reads: the next power of two of the
  longest row's pages, at most the pages of ``max_model_len``.
* On CUDA the step of each bucket is captured once (``torch.cuda.CUDAGraph``, after a warm-up run
  on a side stream) and replayed; the kernel dispatches recorded at capture are re-emitted to the
  trace hook on each replay. On the CPU the same fixed-shape step runs eagerly: it has no host
  synchronisation and no data-dependent shape, which ``tests/test_static_decode.py`` checks by
  tracing it whole with ``torch._dynamo`` (``fullgraph=True``).

Speculative verify steps still take the dynamic path (their per-token states are gathered by the
scheduler on the host).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..model import HybridModel
from ..model.batch import PAD_SLOT_ID, DecodePlan
from ..model.cache import HybridCacheTensors
from ..utils import cdiv


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
    """One bucket's preallocated metadata (``bs`` rows, ``pages`` pages per row) and, on CUDA, its graph."""

    bs: int
    pages: int
    input_ids: torch.Tensor  # [bs] the token of every row (PAD rows: 0)
    plan: DecodePlan  # the plan every step of this bucket runs with: views of fixed tensors
    context_lens: torch.Tensor  # [bs] tokens cached before the step (PAD rows: 0)
    graph: object | None = None  # torch.cuda.CUDAGraph once captured
    logits: torch.Tensor | None = None  # [bs, vocab] the captured output buffer
    dispatches: list = field(default_factory=list)  # kernel choices recorded at capture, re-emitted per replay
    runs: int = 0


@dataclass
class StaticStepInfo:
    """What one static step ran: for the trace's graph-bucket event and the page's PAD-row view."""

    bucket: int  # rows of the bucket
    num_seqs: int  # live rows (the rest are PAD)
    pages: int  # pages per row the bucket reads
    mode: str  # "cuda_graph" | "eager"
    captured: bool  # the bucket's graph was captured in this step
    state_indices: list[int]  # [bucket], PAD rows -1
    context_lens: list[int]  # [bucket]
    block_table: list[list[int]]  # [bucket, pages], -1 where a row has no page


class StaticDecode:
    """Runs all-decode steps over per-bucket fixed buffers (see the module docstring)."""

    def __init__(self, model: HybridModel, cache: HybridCacheTensors, max_num_seqs: int, max_model_len: int,
                 capture: bool | None = None):
        self.model, self.cache = model, cache
        self.sizes = capture_sizes(max_num_seqs)
        self.page_size = cache.page_size
        self.max_pages = cdiv(max_model_len, cache.page_size)
        self.device = cache.recurrent.device
        self.capture = (self.device.type == "cuda") if capture is None else capture
        if self.capture and self.device.type != "cuda":
            raise ValueError(f"capture: CUDA graphs need a CUDA device, the cache is on {self.device}")
        self.buckets: dict[tuple[int, int], DecodeBucket] = {}

    # ---- buckets -------------------------------------------------------------------------------------
    def bucket_shape(self, num_seqs: int, max_context: int) -> tuple[int, int] | None:
        """``(bs, pages)`` for a step of ``num_seqs`` rows whose longest cached context is ``max_context``
        tokens; ``None`` when no bucket holds it (the step runs dynamically)."""
        need = max_context // self.page_size + 1  # pages holding the cached tokens and the new one
        if num_seqs > self.sizes[-1] or need > self.max_pages:
            return None
        bs = next(s for s in self.sizes if s >= num_seqs)
        return bs, min(_pow2_at_least(need), self.max_pages)

    def _new_bucket(self, bs: int, pages: int) -> DecodeBucket:
        dev, L = self.device, pages * self.page_size
        table = torch.full((bs, pages), PAD_SLOT_ID, dtype=torch.long, device=dev)
        plan = DecodePlan(
            cu_seqlens=torch.arange(bs + 1, device=dev),
            state_indices=torch.full((bs,), PAD_SLOT_ID, dtype=torch.long, device=dev),
            kv_write=torch.full((bs,), PAD_SLOT_ID, dtype=torch.long, device=dev),
            kv_pages=table, kv_bias=torch.zeros(bs, 1, L, device=dev),
            kv_pad=torch.zeros(bs, L, 1, dtype=torch.bool, device=dev),
            kv_lens=torch.ones(bs, dtype=torch.long, device=dev), block_table=table, pad=True)
        return DecodeBucket(bs=bs, pages=pages, input_ids=torch.zeros(bs, dtype=torch.long, device=dev), plan=plan,
                            context_lens=torch.zeros(bs, dtype=torch.long, device=dev))

    def _fill(self, b: DecodeBucket, token_ids: list[int], context_lens: list[int], slots: list[int],
              tables: list[list[int]]) -> None:
        """Copy one step's metadata into the bucket's tensors in place (what a graph replay reads)."""
        pad, ps = b.bs - len(token_ids), self.page_size
        table = [list(t[:b.pages]) + [PAD_SLOT_ID] * (b.pages - min(len(t), b.pages)) for t in tables]
        table += [[PAD_SLOT_ID] * b.pages] * pad  # [bs, pages]
        ctx = torch.tensor(context_lens + [0] * pad, dtype=torch.long)  # [bs]
        write = [tables[i][c // ps] * ps + c % ps for i, c in enumerate(context_lens)] + [PAD_SLOT_ID] * pad
        masked = torch.arange(b.pages * ps)[None, :] > ctx[:, None]  # [bs, L]: past each row's new token
        p = b.plan
        b.input_ids.copy_(torch.tensor(token_ids + [0] * pad))
        b.context_lens.copy_(ctx)
        p.state_indices.copy_(torch.tensor(slots + [PAD_SLOT_ID] * pad))
        p.kv_write.copy_(torch.tensor(write))
        p.block_table.copy_(torch.tensor(table))
        p.kv_bias.copy_(torch.zeros(b.bs, 1, b.pages * ps).masked_fill_(masked[:, None, :], float("-inf")))
        p.kv_pad.copy_(masked[:, :, None])
        p.kv_lens.copy_(ctx + 1)  # PAD rows: 1 attended (zero) position, SGLang's seq-len fill value

    # ---- one step ------------------------------------------------------------------------------------
    def run(self, token_ids: list[int], context_lens: list[int], slots: list[int], tables: list[list[int]],
            dispatcher) -> tuple[torch.Tensor, StaticStepInfo] | None:
        """The logits ``[n, vocab]`` of one all-decode step of ``n`` rows, run as its bucket, with what
        ran; ``None`` when no bucket holds the step."""
        shape = self.bucket_shape(len(token_ids), max(context_lens))
        if shape is None:
            return None
        b = self.buckets.get(shape)
        if b is None:
            b = self.buckets[shape] = self._new_bucket(*shape)
        self._fill(b, token_ids, context_lens, slots, tables)
        captured = False
        if self.capture:
            if b.graph is None:
                self._capture(b, dispatcher)
                captured = True
            b.graph.replay()
            for choice in b.dispatches:
                if dispatcher.on_dispatch is not None:
                    dispatcher.on_dispatch(choice)
            logits = b.logits[:len(token_ids)].clone()
        else:
            logits = self.model._decode_step(b.input_ids, b.plan, self.cache, "last", dispatcher)[:len(token_ids)]
        b.runs += 1
        info = StaticStepInfo(bucket=b.bs, num_seqs=len(token_ids), pages=b.pages,
                              mode="cuda_graph" if self.capture else "eager", captured=captured,
                              state_indices=b.plan.state_indices.tolist(), context_lens=b.context_lens.tolist(),
                              block_table=b.plan.block_table.tolist())
        return logits, info

    def _capture(self, b: DecodeBucket, dispatcher) -> None:
        """Record the bucket's step in a CUDA graph, after a warm-up run on a side stream (as
        ``torch.cuda.graphs`` asks). Capture only records; the warm-up runs the step on the bucket's
        live metadata, so the states and KV rows it advanced are put back before the replay runs it."""
        p, c = b.plan, self.cache
        slots = p.state_indices[p.state_indices >= 0]
        rows = p.kv_write[p.kv_write >= 0]
        kv_rows = c.kv.view(c.kv.shape[0], -1, c.kv.shape[-1])  # [L_mla, pages * page_size, Dc+Dp]
        saved = (c.recurrent[:, slots].clone(), c.conv[:, slots].clone(), kv_rows[:, rows].clone())
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.model._decode_step(b.input_ids, p, c, "last", dispatcher.with_hook(None))
        torch.cuda.current_stream().wait_stream(side)
        c.recurrent[:, slots], c.conv[:, slots], kv_rows[:, rows] = saved
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            b.logits = self.model._decode_step(b.input_ids, p, c, "last", dispatcher.with_hook(b.dispatches.append))
        b.graph = graph
