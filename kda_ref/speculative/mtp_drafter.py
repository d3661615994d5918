"""``MTPDrafter``: the target's own MTP layer drafts ``k`` tokens, chained (``speculative="mtp"``).

Article concept ``spec.mtp`` (``docs/article.md#s6-2``). At position ``t`` the layer (:mod:`kda_ref.model.mtp`)
reads the target's final hidden state ``h_t`` and token ``t + 1`` and predicts token ``t + 2``; drafts
``2 .. k`` chain on the layer's own output, and the chained rows are cut back after drafting. vLLM 0.32.0: method
``"mtp"`` (its draft config becomes model type ``kimi_k3_mtp``; ``method="kimi_k3_mtp"`` is deprecated),
``vllm/models/kimi_k3/nvidia/mtp.py::KimiK3MultiTokenPredictorLayer``. :meth:`observe` is
called by :meth:`kda_ref.engine.spec_steps.Speculation.observe` with each step's committed hidden rows.
Design notes: ``docs/spec_decode.md#the-mtp-drafter`` and ``docs/spec_decode.md#one-step``.
"""

from __future__ import annotations

import torch

from ..model import HybridModel, RequestCache
from ..model.size import cache_unit_bytes
from ..utils import cdiv
from .drafter import Drafter
from .mtp_static import StaticDraft

PAGE = 16  # tokens per page of the MTP layer's own cache


class _Request:
    """One request's MTP state: the target's hidden rows from position ``base`` on, and the MTP layer's
    KV over the first ``cache.lengths[0]`` of those positions."""

    def __init__(self, model: HybridModel, base: int, capacity: int):
        self.base = base
        self.hidden: list[torch.Tensor] = []  # [d] rows of positions base, base + 1, ...
        self.cache = RequestCache(model.config, 1, max_tokens=capacity, page_size=PAGE,
                                  mla_layers=[model.config.num_hidden_layers])  # the MTP layer's index

    @property
    def end(self) -> int:
        return self.base + len(self.hidden)


class MTPDrafter(Drafter):
    """A :class:`~kda_ref.speculative.drafter.Drafter` that drafts with the target's first MTP layer."""

    needs_target = True  # build() is given the served model: the MTP layer is its own
    needs_hidden = True  # the engine hands it the target's hidden rows (Speculation.observe)

    @classmethod
    def build(cls, spec, draft_model=None, max_tokens: int = 0, target: HybridModel | None = None) -> "MTPDrafter":
        """The drafter ``speculative="mtp"`` asks for: ``target`` must carry an MTP layer."""
        if target is None or target.config.num_nextn_predict_layers < 1:
            raise ValueError("speculative: 'mtp' drafts with the model's own MTP layer, and this model has none "
                             "(num_nextn_predict_layers = 0); use 'ngram' or a draft model")
        return cls(target, max_tokens, spec.num_speculative_tokens)

    def __init__(self, target: HybridModel, max_tokens: int, k: int = 1):
        self.model, self.max_tokens = target, max_tokens
        self.k = k  # the configured drafts per step: a compiled chain always drafts this many (one shape)
        self.layer = target.mtp[0]
        self._reqs: dict[int, _Request] = {}
        self.static: StaticDraft | None = None  # the fixed-shape draft steps, once the engine compiles

    def compile_steps(self, gemm: bool = False) -> None:
        """Draft through compiled fixed-shape steps (:class:`~kda_ref.speculative.mtp_static.StaticDraft`)."""
        self.static = StaticDraft(self.model, gemm=gemm)

    def held_hidden(self, seq_id: int) -> tuple[int, torch.Tensor] | None:
        """``(base, rows [m, d])``: the target's hidden rows the drafter holds for a request, positions
        ``base .. base + m - 1`` (the tests and the Lab read it); ``None`` for a request it does not hold."""
        req = self._reqs.get(seq_id)
        return None if req is None or not req.hidden else (req.base, torch.stack(req.hidden))

    def kv_rows(self, seq_id: int) -> int:
        """How many positions' MTP rows the drafter keeps in its layer's KV for a request: after a
        :meth:`propose`, exactly the committed ones (the chained rows were cut back). Tests read it."""
        req = self._reqs.get(seq_id)
        return 0 if req is None else req.cache.lengths[0]

    def capacity(self, seq_id: int) -> int:
        """Rows a request's MTP cache has room for now (0 for a request it does not hold); it grows to the
        next power of two of pages when a request outgrows it. Tests read it."""
        req = self._reqs.get(seq_id)
        return 0 if req is None else req.cache.max_tokens

    def release(self, seq_id: int) -> None:
        """Forget a request (it finished, was aborted or preempted)."""
        self._reqs.pop(seq_id, None)

    def cache_bytes_for(self, num_tokens: int) -> int:
        """Bytes the drafter keeps for one request of ``num_tokens`` tokens: the MTP layer's KV pages and
        the target's hidden rows (fp32), outside the engine's pool."""
        _, page = cache_unit_bytes(self.model.config, page_size=PAGE)
        per_layer = page // max(1, len(self.model.config.mla_layer_ids))
        return (1 + cdiv(self._capacity(num_tokens), PAGE)) * per_layer + num_tokens * self.model.config.hidden_size * 4

    def _capacity(self, num_tokens: int) -> int:
        """Rows of a request's MTP cache: ``num_tokens`` rounded up to a power of two of pages (a compiled
        draft step's shape is its pages: few shapes, few compilations; and its MLA reads every page, so no
        more pages than that: 32 for 364 tokens, where a doubling first read 64), within ``max_tokens``
        rounded up to a page. A request that outgrows it gets the next power of two (:meth:`propose`)."""
        pages = 1 << (cdiv(max(num_tokens, 64), PAGE) - 1).bit_length()
        return min(pages, cdiv(self.max_tokens, PAGE)) * PAGE

    def observe(self, seq_id: int, start: int, hidden: torch.Tensor) -> None:
        """The target's hidden rows ``[m, d]`` of positions ``start .. start + m - 1``, just committed. A
        request seen anew, or after a gap (a prefix-cache hit, a step that returned no hidden states),
        starts again from ``start``; a recomputation (after a preemption) rewrites from ``start`` on."""
        req = self._reqs.get(seq_id)
        if req is None or not req.base <= start <= req.end:
            req = self._reqs[seq_id] = _Request(self.model, start, self._capacity(start + hidden.shape[0] + 64))
        del req.hidden[start - req.base:]
        req.cache.lengths[0] = min(req.cache.lengths[0], start - req.base)  # MTP rows past start are stale
        req.hidden.extend(hidden.detach().float().unbind(0))

    @torch.no_grad()
    def propose(self, seq_id: int, tokens: list[int], k: int) -> list[int]:
        """Up to ``k`` chained greedy drafts after ``tokens`` (the request's committed tokens); none when
        the target's hidden state of the position before the last token is not known yet."""
        req = self._reqs.get(seq_id)
        n = len(tokens)
        if k < 1 or req is None or req.end != n - 1 or n - 1 - req.base < 1:
            return []
        room = max(k, self.k)  # a compiled chain drafts the configured k, whatever is asked (fewer near the end)
        if n + room - req.base > req.cache.max_tokens:  # out of room: a larger cache, the rows computed again
            fresh = _Request(self.model, req.base, self._capacity(n + room - req.base))
            fresh.hidden = req.hidden
            req = self._reqs[seq_id] = fresh
        done = min(req.cache.lengths[0], n - 2 - req.base)  # MTP rows kept; the last committed one is run again
        req.cache.lengths[0] = done  # if it was already there (drafting twice without a commit between)
        first = req.base + done
        rows = torch.stack(req.hidden[done:])  # [n - 1 - first, d]: positions first .. n - 2
        if self.static is not None and done == 0 and rows.shape[0] > 1:
            # a prompt's first chain: its rows but the last run once, eagerly, for their KV alone; the last
            # row and the drafts are the fixed-shape step (its rows: 1), not eager draft steps
            self._run(req, rows[:-1], tokens[first + 1:n - 1])
            done, first, rows = done + rows.shape[0] - 1, n - 2, rows[-1:]
        if self.static is not None and done > 0:  # the compiled engine: the whole chain as one fixed-shape step
            ids = torch.tensor(tokens[first + 1:n], dtype=torch.long, device=rows.device)
            drafts = self.static.chain(req.cache.tensors, rows, ids, done, room)[:k]
            req.cache.lengths[0] = n - 1 - req.base  # keep the committed rows' KV only
            return drafts
        logits, x = self._run(req, rows, tokens[first + 1:n])  # row t reads token t + 1
        drafts = [int(torch.argmax(logits[-1]))]
        for _ in range(k - 1):  # chained: the layer's own output and the previous draft
            logits, x = self._run(req, x[-1:], drafts[-1:])
            drafts.append(int(torch.argmax(logits[-1])))
        req.cache.lengths[0] = n - 1 - req.base  # keep the committed rows' KV only
        return drafts

    def _run(self, req: _Request, hidden: torch.Tensor, next_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The MTP layer over ``len(next_ids)`` rows appended to the request's cache, through
        :meth:`~kda_ref.model.mtp.MTPLayer.predict` (fused after the cache's first rows) -> the last row's
        ``(logits [1, vocab], hidden [1, d])``."""
        ids = torch.tensor(next_ids, dtype=torch.long, device=hidden.device)
        batch = req.cache.batch([len(next_ids)])
        logits, x = self.layer.predict(hidden, ids, batch, self.model.dispatcher, cache=req.cache.tensors,
                                       last_only=True)  # a draft reads the last row; the others write KV
        req.cache.advance(batch)
        return logits, x
