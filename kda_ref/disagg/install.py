"""The decode side of a handoff: check it, allocate a slot and pages, install it -- or prefill itself.

Article concept ``pd.state_transfer`` (``docs/article.md#s4-4``). SGLang's decode instance preallocates
the KV pages and a Mamba slot before the transfer and has the prefill write into them
(``DecodePreallocQueue`` in ``python/sglang/srt/disaggregation/decode.py``); here the bytes land in a
receive buffer sized when the request was routed (:func:`~kda_ref.disagg.handoff.layout`) and are
copied into the pool only after every check passed -- one more copy, and a refused handoff never
touches the pool. A refused handoff leaves the request queued on the decode engine, which prefills it
like any other request: the same tokens, nothing leaked. A sound handoff that finds the engine full
waits (its bytes stay in the receive buffer) until a step frees a seat, slots and pages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..engine import LLM, SamplingParams
from ..engine.request import RequestStatus
from ..memory import PageKind
from ..utils import cdiv
from .handoff import HandoffError, Manifest, verify
from .transfer import TransferStatus


@dataclass
class Installed:
    rid: int  # the request's id on the decode engine
    ok: bool  # the handoff was installed (else the engine prefills the prompt itself)
    error: str | None  # why not
    kept_state: bool  # the decode side's prefix cache now holds the boundary state


def checked(recv: torch.Tensor, man: Manifest, pool, prompt: list[int], status: TransferStatus) -> dict | HandoffError:
    """The installable regions of a received handoff (:func:`~kda_ref.disagg.handoff.verify`), or the
    :class:`HandoffError` that refuses it -- checked once, when the last bytes landed."""
    try:
        if status is not TransferStatus.DONE:
            raise HandoffError(f"transfer: status {status.name}")
        return verify(recv, man, pool, prompt)
    except HandoffError as err:
        return err


def install_or_recompute(llm: LLM, prompt: list[int], params: SamplingParams, man: Manifest,
                         regions: dict | HandoffError, text: str | None = None) -> Installed | None:
    """Install a checked handoff (``regions`` from :func:`checked`) on the decode engine ``llm``; when
    the check refused it, queue the prompt there to be prefilled. ``None``: the handoff is sound but
    the engine has no seat, slots or pages for it while running requests will free some -- nothing was
    queued, offer it again after a step (SGLang's decode side likewise waits in its prealloc queue
    until memory allows). Cached states are evicted for it only when the engine is idle, so a waiting
    handoff does not empty the cache step after step."""
    if isinstance(regions, HandoffError):
        return Installed(llm._enqueue(prompt, text, params), False, str(regions), False)
    busy = bool(llm.scheduler.running)
    if not _room(llm, man, evict=not busy):
        if busy:
            return None
        return Installed(llm._enqueue(prompt, text, params), False,
                         "pool: no room for the handoff on an idle decode engine", False)
    rid = llm._enqueue(prompt, text, params)
    req = llm._requests[rid]
    try:
        _install(llm, req, regions, man)
    except HandoffError as err:
        return Installed(rid, False, str(err), False)
    # cross-instance reuse: the received boundary state becomes a cached state of the decode side (a
    # checkpoint of its radix tree, or a state block), as if this engine had prefilled the prompt itself
    return Installed(rid, True, None, llm.prefix_cache.keep_state(req, man.boundary))


def _room(llm: LLM, man: Manifest, evict: bool) -> bool:
    """A seat (``max_num_seqs``), the request's state slots and the KV pages of the boundary, all from
    the pool's one budget (``evict``: evicting cached entries for them first)."""
    sched, pool, cache = llm.scheduler, llm.pool, llm.prefix_cache
    if len(sched.running) >= sched.max_num_seqs:
        return False
    states, need = 1 + sched.extra_state_slots(), sched.pages_for(man.boundary + 1)
    total = states * pool.sizes.state_bytes + need * pool.sizes.kv_page_bytes
    if evict:  # room for both kinds at once: the slots counted as KV pages' worth of bytes
        cache.make_room(PageKind.MLA_KV, need + cdiv(states * pool.sizes.state_bytes, pool.sizes.kv_page_bytes))
    return (pool.can_alloc(PageKind.KDA_STATE, states) and pool.can_alloc(PageKind.MLA_KV, need)
            and pool.free_bytes >= total)


def _install(llm: LLM, req, regions: dict, man: Manifest) -> None:
    """Slots and pages in the decode pool, the regions written there, the request running."""
    sched, pool, t = llm.scheduler, llm.pool, llm.pool.tensors
    states = 1 + sched.extra_state_slots()  # spec_state="slots": the request's 1 + k slots, as admission gives
    if not pool.can_alloc(PageKind.KDA_STATE, states):
        raise HandoffError("pool: no free state slot on the decode side")
    slots = pool.alloc(PageKind.KDA_STATE, states, owner=req.req_id)
    req.slot = slots[0]
    if states > 1:
        req.spec_slots = slots
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


def handoff_info(man: Manifest, secs: float, early_sends: int, early_bytes: int, err: str | None) -> dict:
    """What the decode side reports about one handoff: bytes by kind, transfer seconds, the KV sent
    before the boundary was final, and why it was refused (None when installed)."""
    return {"bytes": man.bytes_by_kind(), "transfer_s": secs, "early_sends": early_sends,
            "kv_bytes_early": early_bytes, "error": err}
