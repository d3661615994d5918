"""``DisaggregatedLLM``: a prefill engine and a decode engine, the handoff between them.

Article concepts ``pd.state_transfer`` (``docs/article.md#s4-4``, ``#s5-6``). The prefill engine runs each
prompt and samples its first token; when the request finishes there, its regions (KDA states, conv
windows, MLA KV) are captured at the prompt boundary with a manifest (:mod:`kda_ref.disagg.handoff`)
and written by the transfer engine (:mod:`kda_ref.disagg.transfer`) into a buffer the decode side
registered. The decode side checks the manifest (boundary, prompt hash, every region, CRC-32s),
allocates a slot and pages in its own pool, installs the regions and decodes from the first token.
A handoff that fails any check or whose transfer failed is released and the decode side prefills the
prompt itself: never a wrong token, nothing leaked.

SGLang does the same split with the prefill pushing (``disaggregation/prefill.py``,
``disaggregation/decode.py``, Mooncake as the transfer engine); vLLM's connectors (Nixl, Mooncake)
have the decode pull. Here both engines live in one process and share the model's weights; the
transfer engine is the in-process :class:`~kda_ref.disagg.transfer.LocalTransferEngine`.
"""

from __future__ import annotations

import collections
import time

import torch

from ..engine import LLM, RequestOutput, SamplingParams
from ..engine.request import RequestStatus
from ..memory import PageKind
from .handoff import HandoffError, Manifest, capture, verify
from .transfer import LocalTransferEngine, Region, TransferStatus

TRANSFERS = ("local", "dist")


class DisaggregatedLLM:
    def __init__(self, model=None, transfer: str = "local", timeout: float = 60.0, **llm_kwargs):
        """``model`` as :class:`~kda_ref.LLM` takes it; ``llm_kwargs`` go to both engines.
        ``transfer="local"``: both engines in this process, step by step; ``"dist"``: a prefill and a
        decode worker process, the bytes over ``torch.distributed`` (gloo), driven by :meth:`generate`;
        a receive waits at most ``timeout`` seconds."""
        if transfer not in TRANSFERS:
            raise ValueError(f"transfer: must be one of {TRANSFERS}, got {transfer!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout: must be a positive number of seconds, got {timeout!r}")
        self.transfer, self.timeout = transfer, float(timeout)
        self.prefill = LLM(model, **llm_kwargs)  # checks every argument here, whichever transfer runs
        self._model, self._llm_kwargs = self.prefill.model, llm_kwargs
        self.decode = LLM(self.prefill.model, **{k: v for k, v in llm_kwargs.items() if k != "seed"})
        peers: dict[str, LocalTransferEngine] = {}
        self.prefill_te = LocalTransferEngine("prefill", peers)
        self.decode_te = LocalTransferEngine("decode", peers)
        self.prefill.scheduler.on_finish = self._on_prefill_finished
        self._ready: list[tuple[object, torch.Tensor, Manifest]] = []  # finished prefills awaiting handoff
        self.counters = {"handoffs": 0, "recomputed": 0, "routed_to_decode": 0, "kv_bytes": 0, "state_bytes": 0,
                         "conv_bytes": 0, "transfer_s": 0.0}
        self.request_bytes: dict[int, dict[str, int]] = {}  # request id -> bytes sent by kind
        self._params: dict[int, SamplingParams] = {}  # our request id -> the caller's sampling parameters
        self._ours_of_prefill: dict[int, int] = {}  # prefill engine's request id -> ours
        self._decode_id: dict[int, int] = {}  # decode engine's request id -> ours
        self._next_id = 0
        # token sequences (prompt + output) the decode engine finished, newest last: a prompt continuing
        # one of them is a follow-up turn whose state the decode engine's prefix cache holds
        self._turns: collections.deque[tuple[int, ...]] = collections.deque(maxlen=256)
        self.last_error: str | None = None

    # ---- prefill side ----------------------------------------------------------------------------
    def _on_prefill_finished(self, req) -> None:
        if req.finish_reason == "length" and req.output_token_ids:  # the prefill's one token: hand it off
            staging, man = capture(self.prefill.pool, req, len(req.prompt_token_ids))
            self._ready.append((req, staging, man))

    # ---- the handoff -----------------------------------------------------------------------------
    def _handoff(self, req, staging: torch.Tensor, man: Manifest, params: SamplingParams, ours: int) -> int:
        """Transfer, check, install on the decode side; returns the decode side's request id."""
        t0 = time.perf_counter()
        src, dst = f"req{man.req_id}", f"recv{man.req_id}"
        recv = torch.zeros(man.total_bytes, dtype=torch.uint8)
        self.prefill_te.register(src, staging)
        self.decode_te.register(dst, recv)
        bid = self.prefill_te.batch_write("decode", [Region(src, r.offset, dst, r.offset, r.nbytes)
                                                     for r in man.regions])
        status = self.prefill_te.status(bid)
        self.prefill_te.unregister(src)
        self.decode_te.unregister(dst)
        self.counters["transfer_s"] += time.perf_counter() - t0
        rid, ok, err = install_or_recompute(self.decode, list(req.prompt_token_ids), params, man, recv, status,
                                            text=req.prompt_text)
        if not ok:
            self.last_error = err
            self.counters["recomputed"] += 1
            return rid
        self.counters["handoffs"] += 1
        self.request_bytes[ours] = man.bytes_by_kind()
        for kind, n in man.bytes_by_kind().items():
            self.counters[f"{kind}_bytes"] += n
        return rid

    # ---- the loop --------------------------------------------------------------------------------
    def _local_only(self, what: str) -> None:
        if self.transfer != "local":
            raise ValueError(f"transfer: {what} drives the in-process engines; with transfer='dist' use generate()")

    def add_request(self, prompt, params: SamplingParams | None = None) -> int:
        """Queue a request on the prefill engine (its first token only); returns its id."""
        self._local_only("add_request")
        sp = params or SamplingParams()
        if not isinstance(sp, SamplingParams):
            raise ValueError(f"params: expected SamplingParams, got {type(sp).__name__}")
        ids = self.prefill._check(prompt, sp)[0]  # bad input raises here, nothing queued
        ours = self._next_id
        self._next_id += 1
        if self._continues_a_decoded_turn(ids):  # cross-instance reuse: the decode side holds the state
            self._decode_id[self.decode.add_request(prompt, sp)] = ours
            self.counters["routed_to_decode"] += 1
        else:
            pid = self.prefill.add_request(prompt, SamplingParams(max_tokens=1, temperature=sp.temperature,
                                                                  top_k=sp.top_k, seed=sp.seed, ignore_eos=True))
            self._ours_of_prefill[pid] = ours
        self._params[ours] = sp
        return ours

    def _continues_a_decoded_turn(self, ids: list[int]) -> bool:
        """Whether ``ids`` extends a conversation the decode engine finished (and it caches states)."""
        if not self.decode.prefix_cache.enabled:
            return False
        return any(len(t) < len(ids) and tuple(ids[:len(t)]) == t for t in self._turns)

    def has_unfinished(self) -> bool:
        return self.prefill.has_unfinished() or self.decode.has_unfinished()

    def step(self) -> list[RequestOutput]:
        """One prefill step, the handoffs of the prefills it finished, one decode step; the requests
        that finished (ids are the ones :meth:`add_request` returned)."""
        self._local_only("step")
        if self.prefill.has_unfinished():
            self.prefill.step()
            while self._ready:
                req, staging, man = self._ready.pop(0)
                ours = self._ours_of_prefill.pop(req.req_id)
                self._decode_id[self._handoff(req, staging, man, self._params[ours], ours)] = ours
        done = []
        if self.decode.has_unfinished():
            for out in self.decode.step():
                out.req_id = self._decode_id.pop(out.req_id)
                self._params.pop(out.req_id, None)
                if self.decode.prefix_cache.enabled:
                    self._turns.append(tuple(out.prompt_token_ids + out.token_ids))
                done.append(out)
        return done

    def generate(self, prompts, params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        """Every prompt prefilled on the prefill engine, handed off, decoded on the decode engine."""
        prompts = list(prompts)
        plist = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"params: {len(plist)} for {len(prompts)} prompts")
        if self.transfer == "dist":
            from .dist import run_dist

            ids = [self.prefill._check(p, sp)[0] for p, sp in zip(prompts, plist)]  # bad input: raised here
            outs, counters = run_dist(self._model, self._llm_kwargs, ids, plist, self.timeout)
            for k in ("handoffs", "recomputed", "kv_bytes", "state_bytes", "conv_bytes"):
                self.counters[k] += counters.get(k, 0)
            self.counters["prefill_failed"] = counters.get("prefill_failed", False)
            return outs
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, plist)]
        outs = {}
        while self.has_unfinished():
            for o in self.step():
                outs[o.req_id] = o
        return [outs[i] for i in ids]

    def stats(self) -> dict:
        """Handoffs, recomputes, bytes by kind (KV / state / conv) in total and per request, transfer
        time, and each engine's own stats."""
        return {**self.counters, "bytes_per_request": dict(self.request_bytes), "prefill": self.prefill.stats(),
                "decode": self.decode.stats()}


def install_or_recompute(llm: LLM, prompt: list[int], params: SamplingParams, man: Manifest, recv: torch.Tensor,
                         status: TransferStatus, text: str | None = None) -> tuple[int, bool, str | None]:
    """Queue ``prompt`` on the decode engine ``llm`` and install the received handoff for it; when the
    transfer failed or a check refuses it, leave it queued: the decode engine prefills it itself.
    Returns ``(request id, installed, why not)``."""
    rid = llm._enqueue(prompt, text, params)
    req = llm._requests[rid]
    try:
        if status is not TransferStatus.DONE:
            raise HandoffError(f"transfer: status {status.name}")
        _install(llm, req, verify(recv, man, llm.pool, prompt), man)
    except HandoffError as err:
        return rid, False, str(err)
    return rid, True, None


def _install(llm: LLM, req, regions: dict, man: Manifest) -> None:
    """Slot and pages in the decode pool, the regions written there, the request running."""
    sched, pool, t = llm.scheduler, llm.pool, llm.pool.tensors
    if not pool.can_alloc(PageKind.KDA_STATE, 1):
        raise HandoffError("pool: no free state slot on the decode side")
    (req.slot,) = pool.alloc(PageKind.KDA_STATE, 1, owner=req.req_id)
    if not sched._grow_pages(req, man.boundary + 1):
        sched.release(req)
        raise HandoffError("pool: no free KV pages on the decode side")
    for layer, li in t.kda_index.items():
        t.recurrent[li, req.slot] = regions[("state", layer)]
        t.conv[li, req.slot] = regions[("conv", layer)]
    pos = torch.arange(man.boundary)
    pages = torch.tensor(req.pages, dtype=torch.long)[pos // t.page_size]
    for layer, mi in t.mla_index.items():
        t.kv[mi, pages, pos % t.page_size] = regions[("kv", layer)]
    sched.waiting.remove(req)
    req.num_computed_tokens = man.boundary
    req.output_token_ids.append(man.first_token)
    req.first_token_time = time.perf_counter()
    req.status = RequestStatus.RUNNING
    sched.running.append(req)
