"""The scenario of the "vLLM state blocks" page (``docs/article.md#s7``, ``#s8``, ``#s9-2``).

A canned scenario of five requests runs one by one through ``kda_ref.LLM(prefix_cache="block")`` on the
tiny model (:data:`BLOCK_SIZE` = 32, :data:`HASH_UNIT` = 8). :func:`run` reads the engine before, during
and after each request and checks that the views agree: :func:`fixed_point` replays vLLM's
``find_longest_cache_hit`` and must equal ``BlockHashTable.find_longest_cache_hit``; outputs are compared
with runs without a cache (:data:`MAX_LOGIT_DIFF`), each fact checked with
:func:`~model_viz.scenarios.common.require` first.

Design notes: ``docs/visualizer.md#vllm-state-blocks``.
"""

from __future__ import annotations
import functools
from dataclasses import dataclass, field
from kda_ref import LLM
from kda_ref.cache.block import BlockHit, chain_hashes, retention_mask
from kda_ref.cache.block.cache import BlockObservation
from kda_ref.trace import CacheEvent, TraceRecorder
from ..scenarios import common as cs
from kda_ref.utils import cdiv


BLOCK_SIZE = 32  # tokens per state block (a multiple of the chunk size 16: mode "all" takes chunk states)
HASH_UNIT = 8  # tokens per hash unit = one KV page
TOKEN_BUDGET = 80  # max_num_batched_tokens: a ~100-token prompt is prefilled in two steps
MAX_TOKENS = 3
INTERVAL = 2 * BLOCK_SIZE  # the "interval" retention keeps one state per 64 tokens
MAX_LOGIT_DIFF = 1e-4
MODES = ("all", "align")
RETENTIONS = ("dense", "interval", "reachable")
SYSTEM = "System: answer briefly, cite sources. "
SYSTEM_LEN = 84  # ends inside block 2 (64..96), on a hash-unit boundary + 4

# (label, prompt parts): "sys" = the system prompt, "cut:<n>" = its first n tokens, "q:<text>:<n>" = n
# tokens of text, "prompt:<i>" = request i's prompt (an exact repeat)
SCENARIO = (
    ("r0", ("sys", "q:Q1 what is a state block?:21")),
    ("r1", ("sys", "q:Q2 and the KV group?:22")),
    ("r2", ("cut:44", "q:Hi! another system:25")),
    ("r3", ("sys", "q:Q3 partial hits?:19")),
    ("r4", ("prompt:0",)),
)
SAVE_OPS = ("checkpoint_create", "snapshot", "commit", "donate")
EVENT_OPS = ("match", "partial_hit", "copy_on_write", "checkpoint_create", "snapshot", "pending", "commit",
             "donate", "evict")


def retention_value(name: str) -> int | None:
    """The engine's ``retention_interval`` for a retention name of :data:`RETENTIONS`."""
    if name not in RETENTIONS:
        raise ValueError(f"retention: must be one of {RETENTIONS}, got {name!r}")
    return {"dense": None, "interval": INTERVAL, "reachable": 0}[name]


def scenario_prompts() -> list[list[int]]:
    prompts: list[list[int]] = []
    for _, parts in SCENARIO:
        prompts.append(cs.build_prompt(parts, cs.text_tokens(SYSTEM, SYSTEM_LEN), prompts))
    return prompts


@functools.lru_cache(maxsize=1)
def reference_outputs() -> tuple:
    """The scenario's prompts without a cache: ``(token ids, logits)`` per request (computed once)."""
    outs = cs.plain_llm().generate(scenario_prompts(), cs.params(MAX_TOKENS))
    return tuple((list(o.token_ids), o.logits) for o in outs)


# ---- the fixed point, replayed on a snapshot of the table ---------------------------------------------
@dataclass
class Round:
    """One pass over the groups: the KV group's left-to-right match and the state group's scan."""

    start: int  # the candidate length the pass started from
    kv: int  # the KV group's answer (left to right, at most ``start``)
    state: int  # the state group's answer (right to left, at most ``kv``)
    scanned: list[tuple[int, str]]  # (boundary, "none" | "kv_only" | "skipped" | "hit") in scan order


def fixed_point(units: list[dict], max_len: int, block_size: int, unit: int, partial: bool) -> list[Round]:
    """vLLM's ``HybridKVCacheCoordinator.find_longest_cache_hit`` on a snapshot: ``units[i]`` says
    whether unit ``i`` of the prefix is cached (``kv``) and holds a state (``state``). Returns the
    rounds; the hit is the last round's ``state``."""
    curr, rounds = max_len, []
    while True:
        start = curr
        kv = 0
        for u in units[: curr // unit]:
            if not u["kv"]:
                break
            kv += unit
        curr = min(curr, kv)
        scanned, st = [], 0
        for i in range(curr // unit - 1, -1, -1):
            u = units[i]
            end = (i + 1) * unit
            if not u["kv"]:
                scanned.append((end, "none"))
            elif u["state"] is None:
                scanned.append((end, "kv_only"))
            elif end % block_size and not partial:
                scanned.append((end, "skipped"))
            else:
                scanned.append((end, "hit"))
                st = end
                break
        curr = min(curr, st)
        rounds.append(Round(start=start, kv=kv, state=st, scanned=scanned))
        if curr == start:
            break
    return rounds


# ---- one run -------------------------------------------------------------------------------------
@dataclass
class BlockStep:
    req_id: int
    label: str
    prompt: list[int]
    output: list[int]
    computed: int  # prompt + computed output tokens (the last sampled token is never computed)
    known: int  # prompt tokens the admission may match (the last one is always computed)
    units: list[dict]  # before admission: per hash unit of the known tokens {"end", "kv", "state"}
    rounds: list[Round]
    hit: int  # the fixed point = tokens reused
    junction: int  # how far the KV group alone matched
    engine_rounds: int
    hit_slot: int | None  # the cached state the hit restores
    active_slot: int | None  # the request's running slot (copy-on-write destination on a hit)
    admit_table: list  # the engine's logical state block table after admission (None = null block)
    step_ends: list[int]
    targets: list[int]  # reachable boundaries the admission added (junction, partial tail)
    replay: int | None  # the replay point: the last block boundary beyond the hit where a state existed
    offered: list[int]  # block boundaries beyond the hit where the mode produced a state
    saved: list[dict]  # {"pos", "op", "slot"}: states this request put into the cache
    pending: list[int]  # positions held as the pending replay point
    events: list[dict]  # the cache events of the request's engine steps (plain dicts)
    after: list[dict]  # after the request: per hash unit of its computed tokens {"end", "kv", "state"}
    cached_states: int
    cached_kv_tokens: int
    same_tokens: bool
    max_diff: float

    @property
    def partial(self) -> bool:
        return self.hit % BLOCK_SIZE != 0

    def boundaries(self) -> list[int]:
        """The block boundaries the request passes beyond its hit (where a state could be saved)."""
        return [b for b in range(BLOCK_SIZE, self.computed + 1, BLOCK_SIZE) if b > self.hit]

    def reachable(self) -> list[int]:
        return sorted(set(self.targets) | ({self.replay} if self.replay else set()))

    def after_states(self) -> list[int]:
        return [u["end"] for u in self.after if u["state"] is not None]


@dataclass
class BlockRun:
    mode: str
    retention: str
    interval: int | None
    partial: bool
    steps: list[BlockStep] = field(default_factory=list)
    state_bytes: int = 0
    kv_unit_bytes: int = 0

    def x_max(self) -> int:
        top = max(s.computed for s in self.steps)
        return cdiv(top, BLOCK_SIZE) * BLOCK_SIZE

    def masks(self, i: int) -> dict[str, list[bool]]:
        """Per retention name, which of step ``i``'s boundaries it keeps (``retention_mask``)."""
        s = self.steps[i]
        return {name: retention_mask(s.boundaries(), retention_value(name), s.reachable()) for name in RETENTIONS}

    def offered(self, i: int) -> list[int]:
        return list(self.steps[i].offered)


def offered_boundaries(mode: str, hit: int, step_ends: list[int], computed: int) -> list[int]:
    """The block boundaries beyond ``hit`` where a state existed during the request: a step ended
    there (both modes), or — mode "all" — the chunk kernel's chunk-start state of a prefill step
    (every :data:`~model_viz.scenarios.common.CHUNK` tokens from the step's start) fell on it."""
    out, start = [], hit
    for end in sorted(set(step_ends)):
        for b in range((start // BLOCK_SIZE + 1) * BLOCK_SIZE, end + 1, BLOCK_SIZE):
            if b == end or (mode == "all" and (b - start) % cs.CHUNK == 0):
                out.append(b)
        start = end
    return [b for b in out if hit < b <= computed]


def _snapshot_units(cache, seq: list[int]) -> list[dict]:
    out = []
    for i, h in enumerate(chain_hashes(seq, HASH_UNIT)):
        node = cache.table.get(h)
        out.append({"end": (i + 1) * HASH_UNIT, "kv": node is not None,
                    "state": None if node is None else node.state})
    return out


def _event_dict(e: CacheEvent) -> dict:
    return {"step": e.step, "op": e.op, "req_id": e.req_id, "position": e.position, "detail": dict(e.detail or {}),
            "concept": e.concepts[0] if e.concepts else ""}


# ---- the engine under observation --------------------------------------------------------------------
@dataclass
class _Watched:
    """The scenario's engine, its trace, and what its block cache's observers saw: per request, the
    moment right after admission and the lengths of its step ends (``BlockPrefixCache.observers``)."""

    llm: LLM
    rec: TraceRecorder
    admitted: dict[int, BlockObservation] = field(default_factory=dict)
    ends: dict[int, list[int]] = field(default_factory=dict)

    @classmethod
    def build(cls, mode: str, interval: int | None, partial: bool) -> "_Watched":
        rec = TraceRecorder()
        llm = LLM(cs.tiny_model(cs.CHUNK), prefix_cache="block", chunk_size=cs.CHUNK, block_size=BLOCK_SIZE,
                  hash_unit=HASH_UNIT, mamba_cache_mode=mode, retention_interval=interval, partial_hits=partial,
                  max_num_batched_tokens=TOKEN_BUDGET, tracer=rec)
        watched = cls(llm, rec)
        llm.prefix_cache.observers.append(watched.observe)
        return watched

    @property
    def table(self):
        """The engine's hash table (``BlockHashTable``)."""
        return self.llm.prefix_cache.table

    def observe(self, seen: BlockObservation) -> None:
        if seen.when == "admit":
            self.admitted[seen.req_id] = seen
        else:
            self.ends.setdefault(seen.req_id, []).append(seen.length)


@dataclass
class _Prediction:
    """Before a request: the hash table's answer, replayed (:func:`fixed_point`) and the engine's own."""

    known: int
    units: list[dict]
    rounds: list[Round]
    engine: BlockHit  # BlockHashTable.find_longest_cache_hit on the same snapshot

    @property
    def hit(self) -> int:
        return self.rounds[-1].state

    @property
    def hit_slot(self) -> int | None:
        return self.units[self.hit // HASH_UNIT - 1]["state"] if self.hit else None


# ---- one request, step by step ------------------------------------------------------------------------
def _predict(table, label: str, prompt: list[int], partial: bool) -> _Prediction:
    """Replay vLLM's fixed point on the table before admission; it must agree with the engine's."""
    known = len(prompt) - 1
    units = _snapshot_units(table, prompt[:known])
    engine_hit = table.find_longest_cache_hit(chain_hashes(prompt[:known], HASH_UNIT), known)
    rounds = fixed_point(units, known, BLOCK_SIZE, HASH_UNIT, partial)
    pred = _Prediction(known, units, rounds, engine_hit)
    cs.require(pred.hit == engine_hit.state_len and rounds[0].kv == engine_hit.junction_len
               and len(rounds) == engine_hit.rounds,
               f"{label}: replayed fixed point {pred.hit} (KV {rounds[0].kv}, {len(rounds)} rounds) != engine "
               f"{engine_hit.state_len} (KV {engine_hit.junction_len}, {engine_hit.rounds} rounds)")
    return pred


def _generate(watched: _Watched, label: str, prompt: list[int], hit: int):
    """Run the request alone; returns its output and the cache events of the steps it ran in. The engine
    must reuse exactly the predicted hit."""
    llm = watched.llm
    before = llm.stats()
    out = llm.generate([prompt], cs.params(MAX_TOKENS))[0]
    after = llm.stats()
    reused = after["cached_prompt_tokens"] - before["cached_prompt_tokens"]
    cs.require(reused == hit, f"{label}: the engine reused {reused} tokens, the fixed point says {hit}")
    steps = range(before["steps"] + 1, after["steps"] + 1)
    return out, [_event_dict(e) for e in cs.cache_events(watched.rec.events) if e.step in steps]


def _check_admission(label: str, pred: _Prediction, mine: list[dict], seen: BlockObservation | None) -> int | None:
    """The match event, the engine's state block table right after admission (null blocks + the hit's
    slot), the copy-on-write and the partial-hit event agree with the prediction; returns the active slot."""
    hit, hit_slot = pred.hit, pred.hit_slot
    match = next((e for e in mine if e["op"] == "match"), None)
    cs.require(match is not None and match["detail"].get("state_len") == hit
               and match["detail"].get("kv_len") == pred.engine.junction_len,
               f"{label}: the match event {match} disagrees with the hit {hit}")
    table, slot = (list(seen.state_block_table), seen.slot) if seen else ([], None)
    expect_table = [None] * (cdiv(hit, BLOCK_SIZE) - 1) + [hit_slot] if hit else []
    cs.require(table == expect_table,
               f"{label}: the engine's state block table {table} != null blocks + slot {expect_table}")
    cow = [e for e in mine if e["op"] == "copy_on_write"]
    if hit:
        cs.require(len(cow) == 1 and cow[0]["detail"]["checkpoint"] == hit_slot
                   and cow[0]["detail"]["active"] == slot and cow[0]["position"] == hit,
                   f"{label}: copy-on-write {cow} does not copy slot {hit_slot} at {hit}")
    else:
        cs.require(not cow, f"{label}: a copy-on-write without a hit")
    part_evs = [e for e in mine if e["op"] == "partial_hit"]
    cs.require(bool(part_evs) == bool(hit % BLOCK_SIZE), f"{label}: partial_hit event vs hit {hit}")
    return slot


def _reachable_targets(pred: _Prediction, prompt: list[int], partial: bool) -> set[int]:
    """The boundaries the admission made reachable beyond the hit: the shared-prefix junction and,
    with partial hits, the prompt's last hash boundary (as ``BlockPrefixCache.admit`` adds them)."""
    hit, junction = pred.hit, pred.engine.junction_len
    junction = junction if partial else junction // BLOCK_SIZE * BLOCK_SIZE
    targets = {junction} if junction > hit else set()
    tail = len(prompt) // HASH_UNIT * HASH_UNIT
    if partial and tail % BLOCK_SIZE and tail > hit:
        targets.add(tail)
    return targets


def _make_step(res: BlockRun, watched: _Watched, label: str, prompt: list[int], out, pred: _Prediction,
               evs: list[dict], active: int | None) -> BlockStep:
    """Everything the page shows about one request, read from the prediction, the observers and the trace."""
    mine = [e for e in evs if e["req_id"] == out.req_id]
    computed = len(prompt) + len(out.token_ids) - 1
    ends = list(watched.ends.get(out.req_id, []))
    offered = offered_boundaries(res.mode, pred.hit, ends, computed)
    seen = watched.admitted.get(out.req_id)
    return BlockStep(
        req_id=out.req_id, label=label, prompt=list(prompt), output=list(out.token_ids), computed=computed,
        known=pred.known, units=pred.units, rounds=pred.rounds, hit=pred.hit, junction=pred.engine.junction_len,
        engine_rounds=pred.engine.rounds, hit_slot=pred.hit_slot, active_slot=active if pred.hit else None,
        admit_table=list(seen.state_block_table) if seen else [], step_ends=ends,
        targets=sorted(_reachable_targets(pred, prompt, res.partial)),
        replay=offered[-1] if offered else None,  # the last boundary with a state beyond the hit
        offered=offered, pending=[e["position"] for e in mine if e["op"] == "pending"], events=evs,
        saved=[{"pos": e["position"], "op": e["op"], "slot": e["detail"].get("checkpoint")}
               for e in mine if e["op"] in SAVE_OPS],
        after=_snapshot_units(watched.table, (prompt + list(out.token_ids))[:computed]),
        cached_states=watched.table.num_states(), cached_kv_tokens=watched.table.num_kv_pages() * HASH_UNIT,
        same_tokens=False, max_diff=float("inf"))


def _check_retention(label: str, step: BlockStep, res: BlockRun) -> None:
    """Every state saved on a block boundary is one the retention keeps and the mode produced; every state
    inside a block is a reachable target; afterwards the cache holds each on the request's path."""
    keep = dict(zip(step.boundaries(), retention_mask(step.boundaries(), res.interval, step.reachable())))
    for sv in step.saved:
        p = sv["pos"]
        if p % BLOCK_SIZE:
            cs.require(res.partial and p in step.targets,
                       f"{label}: state inside a block at {p}, not a target {set(step.targets)}")
        else:
            cs.require(keep.get(p, False) and p in step.offered, f"{label}: saved {p}, the retention drops it "
                       f"or the mode did not produce it (offered {step.offered})")
    cs.require(all(p in step.offered for p in step.pending if p % BLOCK_SIZE == 0),
               f"{label}: pending {step.pending} at a boundary the mode did not produce ({step.offered})")
    held = set(step.after_states())
    cs.require(all(sv["pos"] in held for sv in step.saved),
               f"{label}: saved {step.saved}, the cache holds {sorted(held)}")


def _check_output(label: str, step: BlockStep, out, reference: tuple) -> None:
    """The cached run's tokens and logits equal the run without a cache (fills ``same_tokens``, ``max_diff``)."""
    toks, logits = reference
    step.same_tokens = list(out.token_ids) == toks
    step.max_diff = cs.max_abs_diff(out.logits, logits)
    cs.require(step.same_tokens and step.max_diff <= MAX_LOGIT_DIFF,
               f"{label}: cached output differs from the run without cache (max |dlogit| {step.max_diff:.2e})")


def _run_request(watched: _Watched, res: BlockRun, label: str, prompt: list[int], reference: tuple) -> BlockStep:
    """One request of the scenario: before (predict), during (generate, admission), after (retention, output)."""
    pred = _predict(watched.table, label, prompt, res.partial)
    out, evs = _generate(watched, label, prompt, pred.hit)
    mine = [e for e in evs if e["req_id"] == out.req_id]
    active = _check_admission(label, pred, mine, watched.admitted.get(out.req_id))
    step = _make_step(res, watched, label, prompt, out, pred, evs, active)
    _check_retention(label, step, res)
    _check_output(label, step, out, reference)
    return step


def run(mode: str = "all", retention: str = "dense", partial: bool = True) -> BlockRun:
    """Run the canned scenario under one configuration; every displayed fact is checked here."""
    if mode not in MODES:
        raise ValueError(f"mode: must be one of {MODES}, got {mode!r}")
    interval = retention_value(retention)
    watched = _Watched.build(mode, interval, partial)
    sizes = watched.llm.pool.sizes
    res = BlockRun(mode, retention, interval, partial, state_bytes=sizes.state_bytes, kv_unit_bytes=sizes.kv_page_bytes)
    reference = reference_outputs()
    for ((label, _), prompt), ref in zip(zip(SCENARIO, scenario_prompts()), reference):
        res.steps.append(_run_request(watched, res, label, prompt, ref))
    watched.table.check()
    return res
