"""Engine traces for the step-through pages: run a canned scenario, read a trace, group it by step.

Pure functions (no Streamlit). A scenario is run by ``kda_ref.LLM`` with a
:class:`~kda_ref.trace.TraceRecorder` and returned as **JSONL text**: the canned trace and a trace
the user uploads then go through the same strict reader (:func:`kda_ref.trace.read_jsonl_string`),
and the page can cache plain text with ``st.cache_data``.

:func:`engine_steps` groups the events of a trace into one :class:`StepView` per engine step that
ran a forward (a step with a ``batch_composition`` event), which is what the step controls walk.
"""

from __future__ import annotations
import colorsys
import io
from dataclasses import dataclass, field, replace
from kda_ref import LLM, SamplingParams
from kda_ref.trace import (AdmissionRefused, BatchComposition, EngineStall, KernelDispatch, KVPageEvent, PoolSnapshot,
                           Preemption, RequestAborted, RequestFinished, ScheduleDecision, SpecVerify, StateSlotEvent,
                           TraceEvent, TraceFormatError, TraceRecorder, read_jsonl_string)
from ..families import family
from ..i18n import LocalizedError


MODEL_SEED = 0
PAGE_SIZE = 16

# prompt lengths of the canned requests (request i gets PROMPT_LENS[i] byte tokens)
PROMPT_LENS = (40, 12, 28, 20)
MAX_TOKENS = 4
REQ_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MAX_UPLOAD_BYTES = 8 << 20


class TraceError(LocalizedError):
    """A trace the pages cannot show (malformed, or without engine steps). Carries an i18n key."""


def req_color(req_id) -> str:
    """One colour per request id, stable across steps and figures: the first ids take
    :data:`REQ_COLORS`, later ones a hue stepped by the golden ratio (neighbouring ids far apart, no
    two ids of a long run on the same colour, as a repeating palette would put r6 and r14)."""
    if not isinstance(req_id, int) or req_id < 0:
        return "#7f7f7f"
    if req_id < len(REQ_COLORS):
        return REQ_COLORS[req_id]
    hue = (req_id * 0.6180339887498949) % 1.0
    r, g, b = colorsys.hls_to_rgb(hue, 0.40 if req_id % 2 else 0.52, 0.62)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def prompt(req_id: int, length: int) -> list[int]:
    """A deterministic prompt of exactly ``length`` byte tokens for request ``req_id`` (token ids, so
    the engine adds no BOS and the scenario's prompt lengths are what the pages say)."""
    base = f"request {req_id}: the cat sat on the mat. "
    return list((base * (length // len(base) + 1))[:length].encode())


def run_scenario(prompt_lens, *, token_budget: int, max_tokens: int = MAX_TOKENS,
                 memory_budget_bytes: int = 64 << 20, max_num_seqs: int = 8, page_size: int = PAGE_SIZE,
                 seed: int = MODEL_SEED, mixed_batch: str = "chunk", model: str = "kimi_linear", **metadata) -> str:
    """Run the tiny model (``model``: ``"kimi_linear"``, or ``"k3"`` for K3's tiny layout,
    :mod:`model_viz.families`) on one request per entry of ``prompt_lens`` and return the trace as JSONL.

    ``token_budget`` is ``max_num_batched_tokens``: a prompt longer than what is left of it is
    prefilled in chunks over several steps, mixed with the decodes of the others; ``mixed_batch``
    says how such a step runs the KDA layers (``LLM(mixed_batch=...)``). The header holds the layer
    layout and the scenario parameters (and any extra ``metadata``).
    """
    fam = family(model)
    config = fam.small()
    rec = TraceRecorder()
    llm = LLM(config, seed=seed, max_num_seqs=max_num_seqs, max_num_batched_tokens=token_budget,
              memory_budget_bytes=memory_budget_bytes, page_size=page_size, tracer=rec, mixed_batch=mixed_batch)
    llm.generate([prompt(i, n) for i, n in enumerate(prompt_lens)],
                 SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    sizes = llm.pool.sizes
    buf = io.StringIO()
    rec.write_jsonl(buf, model=fam.small_name, kda_layers=list(config.kda_layer_ids), mla_layers=list(config.mla_layer_ids),
                    token_budget=token_budget, prompt_lens=list(prompt_lens), max_tokens=max_tokens,
                    memory_budget_bytes=memory_budget_bytes, page_size=page_size,
                    kv_page_bytes=sizes.kv_page_bytes, state_bytes=sizes.state_bytes,
                    preemptions=llm.stats()["preemptions"], mixed_batch=mixed_batch, **metadata)
    return buf.getvalue()


def parse_trace(data: bytes | str) -> tuple[dict, list[TraceEvent]]:
    """Read an uploaded (or canned) trace; :class:`TraceError` with the reader's ``line N: ...`` message."""
    if isinstance(data, (bytes, bytearray)):
        if len(data) > MAX_UPLOAD_BYTES:
            raise TraceError("common.trace.err.too_large", n=len(data), max_bytes=MAX_UPLOAD_BYTES)
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise TraceError("common.trace.err.format", msg=f"not UTF-8 text (byte {e.start})") from None
    try:
        header, events = read_jsonl_string(data)
    except TraceFormatError as e:
        raise TraceError("common.trace.err.format", msg=str(e)) from None
    if not any(isinstance(e, BatchComposition) for e in events):
        raise TraceError("common.trace.err.no_steps")
    return header, events


def header_notes(header: dict) -> list[tuple[str, dict]]:
    """What a trace's header says the views cannot show whole, as ``(string key, its values)``: events the
    recorder dropped past its limit (``TraceRecorder(max_events, on_full="drop")``: the last steps lack
    events, a missing pool snapshot draws as empty), and several engines writing one trace (a local
    disaggregation: each numbers its own steps and requests, so one step number holds both)."""
    notes = []
    dropped, engines = header.get("dropped"), header.get("engines")
    if isinstance(dropped, int) and not isinstance(dropped, bool) and dropped > 0:
        notes.append(("common.trace.dropped", {"n": dropped}))
    if isinstance(engines, int) and not isinstance(engines, bool) and engines > 1:
        notes.append(("common.trace.engines", {"n": engines}))
    return notes


@dataclass
class StepView:
    """Everything that happened in one engine step that ran a forward."""

    step: int
    batch: BatchComposition
    decision: ScheduleDecision | None = None
    dispatches: list[KernelDispatch] = field(default_factory=list)
    pool: PoolSnapshot | None = None
    preemptions: list[Preemption] = field(default_factory=list)
    finished: list[RequestFinished] = field(default_factory=list)
    kv_pages: list[KVPageEvent] = field(default_factory=list)
    slots: list[StateSlotEvent] = field(default_factory=list)
    refused: list[AdmissionRefused | EngineStall] = field(default_factory=list)  # errored for memory / a stall
    verifies: list[SpecVerify] = field(default_factory=list)  # each speculative request's verify in the step
    aborted: list[RequestAborted] = field(default_factory=list)  # aborted by the caller after this step
    pool_owners: "PoolOwners | None" = None  # the trace's owners, shared by its views (owners())
    index: int = 0  # this view's position in the trace's views

    def owners(self, kind: str) -> dict[int, object]:
        """``{unit: owner}`` of ``kind`` at the end of this step (``{}`` without pool snapshots)."""
        return self.pool_owners.at(self.index).get(kind, {}) if self.pool_owners is not None else {}

    def verify_of(self, req_id: int) -> SpecVerify | None:
        """Request ``req_id``'s verify in this step (None: it did not verify drafts)."""
        return next((e for e in self.verifies if e.req_id == req_id), None)

    def dispatch(self, layer: int, phase: str) -> KernelDispatch | None:
        """What ``layer`` ran for ``phase`` in this step: its one dispatch, or several summed (a draft tree's
        verify runs one forward per request tree, outside the packed batch), named by the first's kernel."""
        found = [d for d in self.dispatches if d.layer == layer and d.phase == phase]
        if len(found) <= 1:
            return found[0] if found else None
        return replace(found[0], num_seqs=sum(d.num_seqs for d in found), num_tokens=sum(d.num_tokens for d in found))


def engine_steps(events: list[TraceEvent]) -> list[StepView]:
    """One :class:`StepView` per step with a ``batch_composition`` event, in step order."""
    by_step: dict[int, list[TraceEvent]] = {}
    for e in events:
        by_step.setdefault(e.step, []).append(e)
    views = []
    for step in sorted(by_step):
        evs = by_step[step]
        batch = next((e for e in evs if isinstance(e, BatchComposition)), None)
        if batch is None:
            continue
        v = StepView(step=step, batch=batch)
        for e in evs:
            if isinstance(e, ScheduleDecision):
                v.decision = e
            elif isinstance(e, KernelDispatch):
                v.dispatches.append(e)
            elif isinstance(e, PoolSnapshot):
                v.pool = e
            elif isinstance(e, Preemption):
                v.preemptions.append(e)
            elif isinstance(e, RequestFinished):
                v.finished.append(e)
            elif isinstance(e, KVPageEvent):
                v.kv_pages.append(e)
            elif isinstance(e, StateSlotEvent) and e.op in ("alloc", "free"):
                v.slots.append(e)
            elif isinstance(e, (AdmissionRefused, EngineStall)):
                v.refused.append(e)
            elif isinstance(e, SpecVerify):
                v.verifies.append(e)
            elif isinstance(e, RequestAborted):
                v.aborted.append(e)
        views.append(v)
    owners = PoolOwners([v.pool for v in views])
    return [replace(v, pool_owners=owners, index=i) for i, v in enumerate(views)]


class PoolOwners:
    """Who owns every pool unit at each step of a trace, rebuilt from its
    :class:`~kda_ref.trace.PoolSnapshot` events: a full snapshot, then each step's changes. A full copy
    is kept every :attr:`KEYFRAME` steps and the changes are replayed from the one before, so any step
    costs a short replay and the memory stays a fraction of one copy per step."""

    KEYFRAME = 32

    def __init__(self, snapshots: list[PoolSnapshot | None]):
        self._snaps = snapshots
        self._frames: dict[int, dict[str, dict[int, object]]] = {}
        self.max_unit: dict[str, int] = {}  # the largest unit id of each kind anywhere in the trace
        state: dict[str, dict[int, object]] = {}
        for i, snap in enumerate(snapshots):
            self._apply(state, snap)
            if snap is not None:
                for kind, pairs in snap.owners.items():
                    if pairs:
                        self.max_unit[kind] = max(self.max_unit.get(kind, 0), max(u for u, _ in pairs))
            if i % self.KEYFRAME == 0:
                self._frames[i] = {k: dict(v) for k, v in state.items()}
        self._cache: tuple[int, dict] | None = None

    @staticmethod
    def _apply(state: dict, snap: PoolSnapshot | None) -> None:
        if snap is not None:
            PoolSnapshot.fold(state, snap.owners, snap.full)

    def at(self, i: int) -> dict[str, dict[int, object]]:
        """``{kind: {unit: owner}}`` at the end of step ``i`` (a view index); do not modify it."""
        if self._cache is not None and self._cache[0] == i:
            return self._cache[1]
        base = i - i % self.KEYFRAME
        state = {k: dict(v) for k, v in self._frames[base].items()}
        for j in range(base + 1, i + 1):
            self._apply(state, self._snaps[j])
        self._cache = (i, state)
        return state


def layer_layout(header: dict, events: list[TraceEvent]) -> tuple[list[int], list[int]]:
    """``(kda_layers, mla_layers)``: from the header when it says, else KDA layers from the dispatches."""
    kda, mla = header.get("kda_layers"), header.get("mla_layers")
    ok = lambda x: isinstance(x, list) and all(type(i) is int for i in x)  # noqa: E731
    if ok(kda) and ok(mla):
        return list(kda), list(mla)
    return sorted({e.layer for e in events if isinstance(e, KernelDispatch)}), []
