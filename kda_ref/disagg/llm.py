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
    def __init__(self, model=None, transfer: str = "local", timeout: float = 60.0, num_prefill: int = 1,
                 num_decode: int = 1, **llm_kwargs):
        """``model`` as :class:`~kda_ref.LLM` takes it; ``llm_kwargs`` go to every engine.
        ``transfer="local"``: ``num_prefill`` prefill and ``num_decode`` decode engines in this process,
        step by step, each request to the least-loaded engine; ``"dist"``: one prefill and one decode
        worker process, the bytes over ``torch.distributed`` (gloo), driven by :meth:`generate`; a
        receive waits at most ``timeout`` seconds."""
        if transfer not in TRANSFERS:
            raise ValueError(f"transfer: must be one of {TRANSFERS}, got {transfer!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout: must be a positive number of seconds, got {timeout!r}")
        for name, n in (("num_prefill", num_prefill), ("num_decode", num_decode)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"{name}: must be an int >= 1, got {n!r}")
        if transfer == "dist" and (num_prefill, num_decode) != (1, 1):
            raise ValueError("num_prefill / num_decode: transfer='dist' runs one prefill and one decode worker")
        self.transfer, self.timeout = transfer, float(timeout)
        first = LLM(model, **llm_kwargs)  # checks every argument here, whichever transfer runs
        self._model, self._llm_kwargs = first.model, llm_kwargs
        rest = {k: v for k, v in llm_kwargs.items() if k != "seed"}
        self.prefills = [first] + [LLM(first.model, **rest) for _ in range(num_prefill - 1)]
        self.decodes = [LLM(first.model, **rest) for _ in range(num_decode)]
        self.prefill, self.decode = self.prefills[0], self.decodes[0]  # the first of each
        peers: dict[str, LocalTransferEngine] = {}
        self.prefill_tes = [LocalTransferEngine(f"prefill{i}", peers) for i in range(num_prefill)]
        self.decode_tes = [LocalTransferEngine(f"decode{j}", peers) for j in range(num_decode)]
        self.prefill_te, self.decode_te = self.prefill_tes[0], self.decode_tes[0]
        for i, llm in enumerate(self.prefills):
            llm.scheduler.on_finish = self._finished_on(i)
        self._ready: list[tuple[int, object, torch.Tensor, Manifest]] = []  # finished prefills awaiting handoff
        self.counters = {"handoffs": 0, "recomputed": 0, "routed_to_decode": 0, "kv_bytes": 0, "state_bytes": 0,
                         "conv_bytes": 0, "transfer_s": 0.0}
        self.request_bytes: dict[int, dict[str, int]] = {}  # request id -> bytes sent by kind
        self._params: dict[int, SamplingParams] = {}  # our request id -> the caller's sampling parameters
        self._ours_of_prefill: dict[tuple[int, int], int] = {}  # (prefill engine, its request id) -> ours
        self._decode_id: dict[tuple[int, int], int] = {}  # (decode engine, its request id) -> ours
        self._next_id = 0
        # per decode engine, the token sequences (prompt + output) it finished, newest last: a prompt
        # continuing one of them is a follow-up turn whose state that engine's prefix cache holds
        self._turns = [collections.deque(maxlen=256) for _ in self.decodes]
        self.last_error: str | None = None

    @staticmethod
    def _least_loaded(engines: list[LLM]) -> int:
        return min(range(len(engines)), key=lambda i: len(engines[i].scheduler.running) + len(engines[i].scheduler.waiting))

    # ---- prefill side ----------------------------------------------------------------------------
    def _finished_on(self, i: int):
        def on_finish(req) -> None:
            if req.finish_reason == "length" and req.output_token_ids:  # the prefill's one token: hand it off
                staging, man = capture(self.prefills[i].pool, req, len(req.prompt_token_ids))
                self._ready.append((i, req, staging, man))
        return on_finish

    # ---- the handoff -----------------------------------------------------------------------------
    def _handoff(self, i: int, req, staging: torch.Tensor, man: Manifest, params: SamplingParams,
                 ours: int) -> tuple[int, int]:
        """Transfer from prefill engine ``i``, check, install on the least-loaded decode engine; returns
        ``(decode engine, its request id)``."""
        j = self._least_loaded(self.decodes)
        src_te, dst_te = self.prefill_tes[i], self.decode_tes[j]
        t0 = time.perf_counter()
        src, dst = f"req{ours}", f"recv{ours}"
        recv = torch.zeros(man.total_bytes, dtype=torch.uint8)
        src_te.register(src, staging)
        dst_te.register(dst, recv)
        bid = src_te.batch_write(dst_te.name, [Region(src, r.offset, dst, r.offset, r.nbytes) for r in man.regions])
        status = src_te.status(bid)
        src_te.unregister(src)
        dst_te.unregister(dst)
        self.counters["transfer_s"] += time.perf_counter() - t0
        rid, ok, err = install_or_recompute(self.decodes[j], list(req.prompt_token_ids), params, man, recv, status,
                                            text=req.prompt_text)
        if not ok:
            self.last_error = err
            self.counters["recomputed"] += 1
            return j, rid
        self.counters["handoffs"] += 1
        self.request_bytes[ours] = man.bytes_by_kind()
        for kind, n in man.bytes_by_kind().items():
            self.counters[f"{kind}_bytes"] += n
        return j, rid

    # ---- the loop --------------------------------------------------------------------------------
    def _local_only(self, what: str) -> None:
        if self.transfer != "local":
            raise ValueError(f"transfer: {what} drives the in-process engines; with transfer='dist' use generate()")

    def add_request(self, prompt, params: SamplingParams | None = None) -> int:
        """Queue a request: on the decode engine that finished the conversation it continues (when that
        engine caches states), else on the least-loaded prefill engine (its first token only)."""
        self._local_only("add_request")
        sp = params or SamplingParams()
        if not isinstance(sp, SamplingParams):
            raise ValueError(f"params: expected SamplingParams, got {type(sp).__name__}")
        ids = self.prefill._check(prompt, sp)[0]  # bad input raises here, nothing queued
        ours = self._next_id
        self._next_id += 1
        j = self._continued_on(ids)
        if j is not None:  # cross-instance reuse: that decode engine holds the state
            self._decode_id[(j, self.decodes[j].add_request(prompt, sp))] = ours
            self.counters["routed_to_decode"] += 1
        else:
            i = self._least_loaded(self.prefills)
            pid = self.prefills[i].add_request(prompt, SamplingParams(max_tokens=1, temperature=sp.temperature,
                                                                      top_k=sp.top_k, seed=sp.seed, ignore_eos=True))
            self._ours_of_prefill[(i, pid)] = ours
        self._params[ours] = sp
        return ours

    def _continued_on(self, ids: list[int]) -> int | None:
        """The decode engine that holds a state ``ids`` continues -- a conversation it finished, or a
        prompt boundary it received -- when it caches states; else None."""
        for j, turns in enumerate(self._turns):
            if self.decodes[j].prefix_cache.enabled and any(
                    len(t) < len(ids) and tuple(ids[:len(t)]) == t for t in turns):
                return j
        return None

    def has_unfinished(self) -> bool:
        return any(e.has_unfinished() for e in (*self.prefills, *self.decodes))

    def step(self) -> list[RequestOutput]:
        """One step of every prefill engine with work, the handoffs of the prefills they finished, one
        step of every decode engine with work; the requests that finished (ids from :meth:`add_request`)."""
        self._local_only("step")
        for llm in self.prefills:
            if llm.has_unfinished():
                llm.step()
        while self._ready:
            i, req, staging, man = self._ready.pop(0)
            ours = self._ours_of_prefill.pop((i, req.req_id))
            j, rid = self._handoff(i, req, staging, man, self._params[ours], ours)
            self._decode_id[(j, rid)] = ours
            if self.decodes[j].prefix_cache.enabled:  # its radix tree now holds the prompt's boundary state
                self._turns[j].append(tuple(req.prompt_token_ids))
        done = []
        for j, llm in enumerate(self.decodes):
            if not llm.has_unfinished():
                continue
            for out in llm.step():
                out.req_id = self._decode_id.pop((j, out.req_id))
                self._params.pop(out.req_id, None)
                if llm.prefix_cache.enabled:
                    self._turns[j].append(tuple(out.prompt_token_ids + out.token_ids))
                done.append(out)
        return done

    def generate(self, prompts, params: SamplingParams | list[SamplingParams] | None = None) -> list[RequestOutput]:
        """Every prompt prefilled on a prefill engine, handed off, decoded on a decode engine."""
        prompts = list(prompts)
        plist = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"params: {len(plist)} for {len(prompts)} prompts")
        if self.transfer == "dist":
            from .dist import run_dist

            ids = [self.prefill._check(p, sp)[0] for p, sp in zip(prompts, plist)]  # bad input: raised here
            outs, counters = run_dist(self._model, self._llm_kwargs, ids, plist, self.timeout)
            for k in ("handoffs", "recomputed", "kv_bytes", "state_bytes", "conv_bytes", "transfer_s"):
                self.counters[k] += counters.get(k, 0)
            self.request_bytes.update(counters.get("bytes_per_request", {}))
            self.counters["prefill_failed"] = counters.get("prefill_failed", False)
            return outs
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, plist)]
        outs = {}
        while self.has_unfinished():
            for o in self.step():
                outs[o.req_id] = o
        out_list = [outs[i] for i in ids]
        if self.decode.tokenizer is not None:
            for o in out_list:
                o.text = self.decode.tokenizer.decode(o.token_ids)
        return out_list

    def stats(self) -> dict:
        """Handoffs, recomputes, bytes by kind (KV / state / conv) in total and per request, transfer
        time, and each engine's own stats."""
        return {**self.counters, "bytes_per_request": dict(self.request_bytes),
                "prefill": [e.stats() for e in self.prefills], "decode": [e.stats() for e in self.decodes]}

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
    # cross-instance reuse: the received boundary state becomes a checkpoint of the decode side's
    # radix tree (with the received KV pages), as if this engine had prefilled the prompt itself
    llm.prefix_cache.keep_state(req, man.boundary)
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
