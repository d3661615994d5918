"""``StaticDraft``: the MTP layer's chain of drafts as one fixed-shape, compiled step (``speculative="mtp"``
with ``torch_compile=True``).

The plan of each draft step (:func:`contiguous_plan`) is built inside the step from the number of rows cached,
so a chain of ``k`` drafts is one graph per ``(L, P, k)`` (rows, pages, drafts), shared by every drafter of one
model. vLLM 0.32.0: ``SpecDecodeBaseProposer`` (``vllm/v1/spec_decode/llm_base_proposer.py``, which ``EagleProposer``
extends; piecewise CUDA graphs through its ``CudagraphDispatcher``);
SGLang: ``EAGLEDraftCudaGraphRunner``. Design notes: ``docs/spec_decode.md#the-mtp-draft-chain-compiled``.
"""

from __future__ import annotations

import weakref

import torch

from ..model import HybridModel
from ..model.batch import DecodePlan
from ..utils.compiling import compile_and_run


def _no_guards(entries) -> list[bool]:
    """A compiled chain keeps none of dynamo's guards (~60 us of its ~0.36 ms per call on the 2-core CPU):
    each graph serves one key ``(rows, pages, k)``, which fixes every input's shape, and the rest is the
    drafter's constants (fp32 rows and cache, 16-row pages, no autograd); only :meth:`StaticDraft.chain`
    calls it, with that key's arguments."""
    return [False] * len(entries)


_SHARED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # MTP layer -> {gemm: {(L, P, k): _Shape}}


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
    """One ``(L, P, k)``: how many chains it ran, its compiled step once it has one, or that compiling failed."""

    def __init__(self):
        self.steps, self.compiled, self.failed, self.compile_s = 0, None, False, 0.0


class StaticDraft:
    """The compiled draft steps of one model's MTP layer (module docstring); ``compile=False`` runs the same
    fixed-shape step eagerly (the tests compare it with the drafter's dynamic path). ``gemm``: compiled with
    the C++ GEMM template over frozen weights (``LLM(compile_gemm=True)``); its graphs are kept apart from
    the default ones."""

    def __init__(self, model: HybridModel, compile: bool = True, gemm: bool = False):
        self.layer, self.compile, self.gemm = model.mtp[0], compile, gemm
        self.dispatcher = model.dispatcher.with_hook(None)  # the MTP layer is MLA: no KDA kernel to record
        self.shapes: dict = _SHARED.setdefault(self.layer, {}).setdefault(gemm, {}) if compile else {}

    def chain(self, tensors, hidden: torch.Tensor, next_ids: torch.Tensor, ctx: int, k: int) -> list[int]:
        """``k`` greedy drafts, chained: the MTP layer over ``L = len(next_ids)`` rows after ``ctx`` cached
        ones of the MTP cache ``tensors`` (a :class:`~kda_ref.model.RequestCache`'s), whose last row's logits
        give draft 1, then ``k - 1`` rows of one each (the layer's own output and the previous draft), all
        written into the cache -- one fixed-shape step per ``(L, pages, k)``, without a host round trip
        between the drafts."""
        key = (next_ids.shape[0], tensors.kv.shape[1] - 1, k)
        shape = self.shapes.setdefault(key, _Shape())
        args = (tensors, hidden, next_ids, torch.tensor([ctx], device=hidden.device), k)
        shape.steps += 1
        if shape.compiled is not None:
            drafts = shape.compiled(*args)
        elif not self.compile or shape.failed or shape.steps == 1:
            drafts = self._chain(*args)
        else:
            drafts = self._compile(shape, key, args)
        return drafts.tolist()

    def _chain(self, tensors, hidden, next_ids, ctx, k: int) -> torch.Tensor:
        """:meth:`chain`'s step: the drafts ``[k]`` (no data-dependent shape, no host read)."""
        pages, ps = tensors.kv.shape[1] - 1, tensors.page_size
        plan = contiguous_plan(ctx, next_ids.shape[0], pages, ps)
        logits, x = self.layer.predict_step(hidden, next_ids, plan, tensors, self.dispatcher, last_only=True)
        drafts = [logits[-1].argmax()]  # the earlier rows were run for their KV alone
        for i in range(k - 1):  # the layer's own output at the previous position, the previous draft
            plan = contiguous_plan(ctx + next_ids.shape[0] + i, 1, pages, ps)
            logits, x = self.layer.predict_step(x[-1:], drafts[-1].view(1), plan, tensors, self.dispatcher)
            drafts.append(logits[-1].argmax())
        return torch.stack(drafts)

    def _compile(self, shape: _Shape, key: tuple[int, int, int], args) -> torch.Tensor:
        what = "the MTP draft chain of %d rows, %d pages, %d drafts" % key
        out, shape.compiled, shape.compile_s = compile_and_run(self._chain, args, what, guard_filter_fn=_no_guards,
                                                               gemm=self.gemm)
        shape.failed = shape.compiled is None
        return self._chain(*args) if shape.failed else out
