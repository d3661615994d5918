"""The decode side of a handoff: check it, allocate a slot and pages, install it -- or prefill itself.

Article concept ``pd.state_transfer`` (``docs/article.md#s4-4``). SGLang's decode instance preallocates
the KV pages and a Mamba slot before the transfer and has the prefill write into them
(``DecodePreallocQueue`` in ``python/sglang/srt/disaggregation/decode.py``); here the bytes land in a
receive buffer sized when the request was routed (:func:`~kda_ref.disagg.handoff.layout`) and are
copied into the pool only after every check passed -- one more copy, and a refused handoff never
touches the pool. A refused handoff leaves the request queued on the decode engine, which prefills it
like any other request: the same tokens, nothing leaked.
"""

from __future__ import annotations

import time

import torch

from ..engine import LLM, SamplingParams
from ..engine.request import RequestStatus
from ..memory import PageKind
from .handoff import HandoffError, Manifest, verify
from .transfer import TransferStatus


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


def handoff_info(man: Manifest, secs: float, early_sends: int, early_bytes: int, err: str | None) -> dict:
    """What the decode side reports about one handoff: bytes by kind, transfer seconds, the KV sent
    before the boundary was final, and why it was refused (None when installed)."""
    return {"bytes": man.bytes_by_kind(), "transfer_s": secs, "early_sends": early_sends,
            "kv_bytes_early": early_bytes, "error": err}
