"""The decode side of a handoff: check it, allocate a slot and pages, install it -- or prefill itself.

Article concept ``pd.state_transfer`` (``docs/article.md#s4-4``). Where SGLang's decode side has the
prefill write into preallocated pages and a Mamba slot (``decode.py::DecodePreallocQueue``), the bytes
land here in a receive buffer and reach the pool only after every check; a refused handoff is
prefilled by the decode engine, a sound one that finds the engine full waits for room.
Design notes: ``docs/disaggregation.md#what-is-built-2026-12-01``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..engine import LLM, SamplingParams
from ..memory import PoolExhausted
from ..model.layer_state import BoundaryState
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
        return Installed(llm.enqueue(prompt, text, params), False, str(regions), False)
    busy = llm.num_running > 0
    if not llm.has_room_for(man.boundary, evict=not busy):
        if busy:
            return None
        return Installed(llm.enqueue(prompt, text, params), False,
                         "pool: no room for the handoff on an idle decode engine", False)
    rid = llm.enqueue(prompt, text, params)
    try:
        llm.admit_prefilled(rid, boundary_state(regions), man.first_token, man.sampler_state)
    except PoolExhausted as err:
        return Installed(rid, False, str(err), False)
    # cross-instance reuse: the received boundary state becomes a cached state of the decode side (a
    # checkpoint of its radix tree, or a state block), as if this engine had prefilled the prompt itself
    return Installed(rid, True, None, llm.prefix_cache.keep_state(llm.request(rid), man.boundary))


def boundary_state(regions: dict) -> BoundaryState:
    """The checked regions ``{(kind, layer): tensor}`` as the :class:`~kda_ref.model.layer_state.BoundaryState`
    the decode engine installs."""
    part = lambda kind: {layer: x for (k, layer), x in regions.items() if k == kind}  # noqa: E731
    return BoundaryState(recurrent=part("state"), conv=part("conv"), kv=part("kv"))


def handoff_info(man: Manifest, secs: float, early_sends: int, early_bytes: int, err: str | None) -> dict:
    """What the decode side reports about one handoff: bytes by kind, transfer seconds, the KV sent
    before the boundary was final, and why it was refused (None when installed)."""
    return {"bytes": man.bytes_by_kind(), "transfer_s": secs, "early_sends": early_sends,
            "kv_bytes_early": early_bytes, "error": err}
