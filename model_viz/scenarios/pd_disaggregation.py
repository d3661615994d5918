"""The scenario of the "Disaggregation" page (``docs/article.md#s4-4``, ``#s5-6``; concept
``pd.state_transfer``).

The trained tiny model serves one request through :class:`kda_ref.disagg.DisaggregatedLLM` (both engines
in this process); every stage of the handoff is read from that run, the tokens checked against one
engine. "Break it" ships a handoff the decode side must refuse, then installs it unchecked through
:meth:`kda_ref.LLM.admit_prefilled`.

Design notes: ``docs/visualizer.md#disaggregation``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from kda_ref import LLM, ModelConfig, SamplingParams
from kda_ref.disagg import DisaggregatedLLM, HandoffError, Manifest, capture, verify
from kda_ref.disagg.install import boundary_state
from kda_ref.disagg.volume import handoff_bytes
from ..scenarios import common as cs

PROMPT_CHARS = 200
NEW_TOKENS = 24
STAGES = ("prefill", "capture", "transfer", "verify", "decode")
BREAKS = ("boundary", "kv_only")
SHORTER_BY = 16  # tokens the mixed-boundary state is behind the KV
STEP_TOKENS = 64  # the prefill engine's token budget per step: the prompt is prefilled in chunks
VOLUME_LENGTHS = (1024, 4096, 16384, 65536, 131072)


def page_model():
    return cs.trained_model()


def prompt_ids(model) -> list[int]:
    return cs.docs_prompt(model, PROMPT_CHARS)


@dataclass
class PDView:
    prompt_len: int
    manifest: Manifest
    tokens: list[int]  # generated (the first by the prefill engine), equal to one engine's (checked)
    first_token: int
    transfer_s: float
    decode_slot: int  # the state slot the decode engine installed the handoff in
    decode_pages: list[int]  # and its KV pages
    prefill_slot: int
    prefill_pages: list[int]
    pools_empty_after: bool
    sends: list[dict] = field(default_factory=list)  # the request's sends: KV rows per chunk, then the last one


def run() -> PDView:
    model = page_model()
    ids = prompt_ids(model)
    params = SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True)
    kw = dict(chunk_size=cs.CHUNK, max_num_batched_tokens=STEP_TOKENS)
    want = LLM(model, **kw).generate([ids], params, use_tqdm=False)[0]
    d = DisaggregatedLLM(model, **kw)
    out = d.generate([ids], params)[0]
    seen = d.handoffs[0]  # the manifest and the slot and pages on each side
    cs.require(out.token_ids == want.token_ids, "disaggregation changed the tokens")
    cs.require(d.counters["handoffs"] == 1 and d.counters["recomputed"] == 0, "the handoff was not installed")
    cs.require(d.counters["early_sends"] >= 1, "the prompt fits one step: no KV left before the boundary")
    return PDView(prompt_len=len(ids), manifest=seen["manifest"], tokens=list(out.token_ids),
                  first_token=seen["manifest"].first_token, transfer_s=d.counters["transfer_s"],
                  decode_slot=seen["decode_slot"], decode_pages=seen["decode_pages"], prefill_slot=seen["prefill_slot"],
                  prefill_pages=seen["prefill_pages"],
                  pools_empty_after=d.prefill.pool.is_empty() and d.decode.pool.is_empty(),
                  sends=[dict(r) for r in d.send_log])


@dataclass
class BrokenPD:
    mode: str
    refusal: str  # the decode side's HandoffError
    reference: list[int]  # the right tokens
    unchecked: list[int]  # what an unchecked install decodes
    first_divergence: int | None
    removed_regions: list[str] = field(default_factory=list)


def _prefilled(model, ids: list[int]):
    """A prefill engine's handoff for ``ids`` (its regions and manifest), and the engine."""
    llm = LLM(model, chunk_size=cs.CHUNK)
    got = []
    llm.add_finish_listener(lambda req: got.append(capture(llm.pool, req, len(req.prompt_token_ids))))
    llm.generate([ids], SamplingParams(max_tokens=1, ignore_eos=True), use_tqdm=False)
    return got[0]


def break_it(mode: str) -> BrokenPD:
    if mode not in BREAKS:
        raise ValueError(f"mode: must be one of {BREAKS}, got {mode!r}")
    model = page_model()
    ids = prompt_ids(model)
    params = SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True)
    staging, man = _prefilled(model, ids)
    if mode == "boundary":  # the states and conv windows after a shorter prefix, the KV of the whole prompt
        short_staging, short_man = _prefilled(model, ids[:-SHORTER_BY])
        regions, parts, at = [], [], 0
        for r in man.regions:
            src, spec = (short_staging, next(x for x in short_man.regions if (x.kind, x.layer) == (r.kind, r.layer))) \
                if r.kind != "kv" else (staging, r)
            parts.append(src[spec.offset:spec.offset + spec.nbytes])
            regions.append(dataclasses.replace(spec, offset=at))
            at += spec.nbytes
        staging, man = torch.cat(parts), dataclasses.replace(man, regions=regions)
        removed = []
    else:  # "kv_only": what a pure-attention handoff carries
        removed = [f"{r.kind} {r.layer}" for r in man.regions if r.kind != "kv"]
        man = dataclasses.replace(man, regions=[r for r in man.regions if r.kind == "kv"])
    decode = LLM(model, chunk_size=cs.CHUNK)
    try:
        verify(staging, man, decode.pool, ids)
        refusal = ""
    except HandoffError as err:
        refusal = str(err)
    cs.require(bool(refusal), f"the decode side accepted a {mode} handoff")
    reference = LLM(model, chunk_size=cs.CHUNK).generate([ids], params, use_tqdm=False)[0].token_ids
    # what happens without the check: install whatever arrived (missing regions stay as the pool has them)
    rid = decode.enqueue(ids, None, params)
    regions = {(r.kind, r.layer): staging[r.offset:r.offset + r.nbytes].clone().view(torch.float32).view(r.shape)
               for r in man.regions}
    t = decode.pool.tensors
    for layer in t.kda_index:  # a missing region: the fresh slot's zeros
        regions.setdefault(("state", layer), torch.zeros(t.recurrent.shape[2:]))
        regions.setdefault(("conv", layer), torch.zeros(t.conv.shape[2:]))
    decode.admit_prefilled(rid, boundary_state(regions), man.first_token)  # the public install, unchecked
    outs = {}
    while decode.has_unfinished():
        outs.update({o.req_id: o for o in decode.step()})
    unchecked = list(outs[rid].token_ids)
    first = next((i for i, (a, b) in enumerate(zip(unchecked, reference)) if a != b), None)
    return BrokenPD(mode=mode, refusal=refusal, reference=list(reference), unchecked=unchecked,
                    first_divergence=first, removed_regions=removed)


def volume() -> dict[str, list[dict]]:
    """Bytes of one handoff by kind and prompt length, the tiny model and 48B (as served)."""
    return {name: [{"tokens": T, **handoff_bytes(cfg, T)} for T in VOLUME_LENGTHS]
            for name, cfg in (("tiny", ModelConfig.tiny()), ("48b", ModelConfig.kimi_linear_48b()))}
