"""``StaticDraft``: the MTP layer's draft step as a fixed-shape, compiled step (``speculative="mtp"`` with
``torch_compile=True``).

A draft of :class:`~kda_ref.speculative.mtp_drafter.MTPDrafter` appends ``L`` rows to one request's MTP
cache (a :class:`~kda_ref.model.RequestCache` of one sequence: its rows lie in pages ``1 .. P`` in order, so
position ``p`` is flat latent row ``page_size + p``). Everything the step needs besides the rows' inputs
follows from the number of rows already cached, ``ctx``: where the new rows are written and which
positions each attends to (:func:`contiguous_plan`). Built inside the step from ``ctx`` as a tensor, the
plan costs no host work and no data-dependent shape, so the whole draft -- the plan, the MTP layer's
norms and projection, its MLA and MoE, the head -- compiles to one graph per ``(L, P)``: ``L`` is 1 for a
chained draft and ``1 + accepted`` for the first draft after a verify; ``P`` is the cache's pages, a power
of two (:meth:`MTPDrafter._capacity`). As the engine's static buckets do
(:mod:`kda_ref.engine.static_decode`), a shape's first step runs eagerly (it builds the fused weights the
graph reads), its second compiles it, later ones run the graph; a shape whose compilation fails runs
eagerly, with a warning. The graphs belong to the MTP layer: every drafter of one model shares them.

The MLA reads all ``P`` pages, masked past each row's position (the engine's static steps read a power of
two of pages the same way). vLLM runs the MTP drafter's forward inside its captured CUDA graphs, keyed by
batch size (``vllm/v1/spec_decode/eagle.py``, ``EagleProposer``, ``cudagraph_batch_sizes``); SGLang captures
the draft model's decode steps (``EAGLEDraftCudaGraphRunner``).
"""

from __future__ import annotations

import logging
import time
import weakref

import torch

from ..model import HybridModel
from ..model.batch import DecodePlan
from ..utils.compiling import COMPILE_OPTIONS, compile_errors

log = logging.getLogger("kda_ref")
_SHARED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # MTP layer -> {(L, P): _Shape}


def contiguous_plan(ctx: torch.Tensor, rows: int, pages: int, page_size: int) -> DecodePlan:
    """The :class:`DecodePlan` of ``rows`` new rows of a one-sequence cache whose rows lie in pages ``1 ..
    pages`` in order, after ``ctx [1]`` cached ones: new row ``t`` is written at flat row ``page_size + ctx +
    t`` and attends to positions ``<= ctx + t``; every page is read (past the end masked and zeroed)."""
    dev = ctx.device
    tok = ctx + torch.arange(rows, device=dev)  # [L] positions of the new rows
    pos = torch.arange(pages * page_size, device=dev)  # [P * page_size]
    bias = torch.zeros(1, rows, pages * page_size, device=dev).masked_fill_(pos > tok[:, None], float("-inf"))
    table = (1 + torch.arange(pages, device=dev))[None]  # [1, P]
    return DecodePlan(cu_seqlens=torch.tensor([0, rows], device=dev), state_indices=torch.ones(1, dtype=torch.long, device=dev),
                      kv_write=page_size + tok, kv_pages=table, kv_bias=bias, kv_pad=(pos[None, :] > tok[-1:])[:, :, None],
                      kv_lens=ctx + rows, block_table=table, tokens=rows, context_lens=ctx)


class _Shape:
    """One ``(L, P)``: how many steps it ran, its compiled step once it has one, or that compiling failed."""

    def __init__(self):
        self.steps, self.compiled, self.failed, self.compile_s = 0, None, False, 0.0


class StaticDraft:
    """The compiled draft steps of one model's MTP layer (module docstring); ``compile=False`` runs the same
    fixed-shape step eagerly (the tests compare it with the drafter's dynamic path)."""

    def __init__(self, model: HybridModel, compile: bool = True):
        self.layer, self.compile = model.mtp[0], compile
        self.dispatcher = model.dispatcher.with_hook(None)  # the MTP layer is MLA: no KDA kernel to record
        self.shapes: dict = _SHARED.setdefault(self.layer, {}) if compile else {}

    def run(self, tensors, hidden: torch.Tensor, next_ids: torch.Tensor, ctx: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits [L, vocab], x [L, d])`` of ``L = len(next_ids)`` rows after ``ctx`` cached ones of the
        MTP cache ``tensors`` (a :class:`~kda_ref.model.RequestCache`'s), which it writes."""
        key = (next_ids.shape[0], tensors.kv.shape[1] - 1)
        shape = self.shapes.setdefault(key, _Shape())
        args = (tensors, hidden, next_ids, torch.tensor([ctx], device=hidden.device))
        shape.steps += 1
        if shape.compiled is not None:
            return shape.compiled(*args)
        if not self.compile or shape.failed or shape.steps == 1:
            return self._step(*args)
        return self._compile(shape, key, args)

    def _step(self, tensors, hidden, next_ids, ctx):
        plan = contiguous_plan(ctx, next_ids.shape[0], tensors.kv.shape[1] - 1, tensors.page_size)
        return self.layer.predict_step(hidden, next_ids, plan, tensors, self.dispatcher)

    def _compile(self, shape: _Shape, key: tuple[int, int], args):
        step = torch.compile(self._step, fullgraph=True, dynamic=False, isolate_recompiles=True, options=dict(COMPILE_OPTIONS))
        log.info("compiling the MTP draft step of %d rows over %d pages (torch.compile, inductor) ...", *key)
        t0 = time.perf_counter()
        try:
            out = step(*args)
        except compile_errors() as e:  # raised while compiling, before the graph ran: nothing was written
            shape.failed = True
            log.warning("compiling the MTP draft step of %d rows over %d pages failed; it runs eagerly: %s: %s",
                        *key, type(e).__name__, e)
            return self._step(*args)
        shape.compile_s, shape.compiled = time.perf_counter() - t0, step
        log.info("compiled the MTP draft step of %d rows over %d pages in %.1f s", *key, shape.compile_s)
        return out
