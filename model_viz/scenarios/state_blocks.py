"""The scenario of the "vLLM state blocks" page (``docs/article.md#s7``, ``#s8``, ``#s9-2``).

A canned scenario — a shared system prompt, a second question that branches after it, a request
that diverges *inside* a block of the system prompt, a third question that can resume from a state
inside a block (a partial hit), and an exact repeat of the first request — runs request by request
through ``kda_ref.LLM(prefix_cache="block")`` on the random-weight tiny model, with a small block
size (:data:`BLOCK_SIZE` = 32 tokens, hash unit :data:`HASH_UNIT` = 8) so that a ~100-token prompt
spans a few state blocks and a dozen hash units.

For every request, :func:`run` reads the engine three ways and checks that they agree:

* **before** the request, the hash table (``llm.prefix_cache.table``): which hash units of the prompt are
  cached (KV group) and which hold a state (state group); :func:`fixed_point` replays vLLM's
  ``find_longest_cache_hit`` on that snapshot round by round, and its answer must equal the engine's
  ``BlockHashTable.find_longest_cache_hit`` *and* the engine's ``cached_prompt_tokens``;
* **during** the request, the engine's own logical state block table right after admission
  (``BlockPrefixCache.state_block_table``: null blocks, then the one real state block of the hit),
  the step ends, and the trace's ``CacheEvent`` s (match / partial_hit / copy_on_write / snapshot /
  checkpoint_create / pending / commit / donate / evict);
* **after** the request, the states the cache holds along the request's path.

The outputs of the whole scenario are compared with the same prompts run without a cache (tokens
identical, logits within :data:`MAX_LOGIT_DIFF`); every fact the page shows is checked with
:func:`~model_viz.scenarios.common.require` first.
"""

from __future__ import annotations
import functools
from dataclasses import dataclass, field
from kda_ref import LLM
from kda_ref.cache.block import chain_hashes, retention_mask
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


def run(mode: str = "all", retention: str = "dense", partial: bool = True) -> BlockRun:
    """Run the canned scenario under one configuration; every displayed fact is checked here."""
    if mode not in MODES:
        raise ValueError(f"mode: must be one of {MODES}, got {mode!r}")
    interval = retention_value(retention)
    rec = TraceRecorder()
    llm = LLM(cs.tiny_model(cs.CHUNK), prefix_cache="block", chunk_size=cs.CHUNK, block_size=BLOCK_SIZE,
              hash_unit=HASH_UNIT, mamba_cache_mode=mode, retention_interval=interval, partial_hits=partial,
              max_num_batched_tokens=TOKEN_BUDGET, tracer=rec)
    prefix, cache = llm.prefix_cache, llm.prefix_cache.table
    admitted: dict[int, dict] = {}
    ends: dict[int, list[int]] = {}
    orig_admit, orig_snapshot = prefix.admit, prefix.snapshot

    def admit(req):  # read the engine's own logical block table right after admission
        n = orig_admit(req)
        admitted[req.req_id] = {"table": prefix.state_block_table(req), "slot": req.slot, "hit": n}
        return n

    def snapshot(req, length, start=None):
        ends.setdefault(req.req_id, []).append(length)
        return orig_snapshot(req, length, start)

    prefix.admit, prefix.snapshot = admit, snapshot
    ref = reference_outputs()
    res = BlockRun(mode, retention, interval, partial, state_bytes=llm.pool.sizes.state_bytes,
                   kv_unit_bytes=llm.pool.sizes.kv_page_bytes)
    prompts = scenario_prompts()
    for k, ((label, _), prompt) in enumerate(zip(SCENARIO, prompts)):
        known = len(prompt) - 1
        units = _snapshot_units(cache, prompt[:known])
        hashes = chain_hashes(prompt[:known], HASH_UNIT)
        engine_hit = cache.find_longest_cache_hit(hashes, known)
        rounds = fixed_point(units, known, BLOCK_SIZE, HASH_UNIT, partial)
        hit = rounds[-1].state
        cs.require(hit == engine_hit.state_len and rounds[0].kv == engine_hit.junction_len
                   and len(rounds) == engine_hit.rounds,
                   f"{label}: replayed fixed point {hit} (KV {rounds[0].kv}, {len(rounds)} rounds) != engine "
                   f"{engine_hit.state_len} (KV {engine_hit.junction_len}, {engine_hit.rounds} rounds)")
        hit_slot = units[hit // HASH_UNIT - 1]["state"] if hit else None

        before = llm.stats()
        first = before["steps"] + 1
        out = llm.generate([prompt], cs.params(MAX_TOKENS))[0]
        after_stats = llm.stats()
        last = after_stats["steps"]
        reused = after_stats["cached_prompt_tokens"] - before["cached_prompt_tokens"]
        cs.require(reused == hit, f"{label}: the engine reused {reused} tokens, the fixed point says {hit}")
        evs = [_event_dict(e) for e in cs.cache_events(rec.events) if first <= e.step <= last]
        mine = [e for e in evs if e["req_id"] == out.req_id]
        match = next((e for e in mine if e["op"] == "match"), None)
        cs.require(match is not None and match["detail"].get("state_len") == hit
                   and match["detail"].get("kv_len") == engine_hit.junction_len,
                   f"{label}: the match event {match} disagrees with the hit {hit}")
        adm = admitted.get(out.req_id, {"table": [], "slot": None, "hit": 0})
        expect_table = [None] * (cdiv(hit, BLOCK_SIZE) - 1) + [hit_slot] if hit else []
        cs.require(adm["table"] == expect_table,
                   f"{label}: the engine's state block table {adm['table']} != null blocks + slot {expect_table}")
        cow = [e for e in mine if e["op"] == "copy_on_write"]
        if hit:
            cs.require(len(cow) == 1 and cow[0]["detail"]["checkpoint"] == hit_slot
                       and cow[0]["detail"]["active"] == adm["slot"] and cow[0]["position"] == hit,
                       f"{label}: copy-on-write {cow} does not copy slot {hit_slot} at {hit}")
        else:
            cs.require(not cow, f"{label}: a copy-on-write without a hit")
        part_evs = [e for e in mine if e["op"] == "partial_hit"]
        cs.require(bool(part_evs) == bool(hit % BLOCK_SIZE), f"{label}: partial_hit event vs hit {hit}")

        computed = len(prompt) + len(out.token_ids) - 1
        junction = engine_hit.junction_len if partial else engine_hit.junction_len // BLOCK_SIZE * BLOCK_SIZE
        targets = {junction} if junction > hit else set()
        tail = len(prompt) // HASH_UNIT * HASH_UNIT
        if partial and tail % BLOCK_SIZE and tail > hit:
            targets.add(tail)
        offered = offered_boundaries(mode, hit, ends.get(out.req_id, []), computed)
        replay = offered[-1] if offered else None  # the last boundary with a state beyond the hit
        saved = [{"pos": e["position"], "op": e["op"], "slot": e["detail"].get("checkpoint")}
                 for e in mine if e["op"] in SAVE_OPS]
        pending = [e["position"] for e in mine if e["op"] == "pending"]
        step = BlockStep(
            req_id=out.req_id, label=label, prompt=list(prompt), output=list(out.token_ids), computed=computed,
            known=known, units=units, rounds=rounds, hit=hit, junction=engine_hit.junction_len,
            engine_rounds=engine_hit.rounds, hit_slot=hit_slot, active_slot=adm["slot"] if hit else None,
            admit_table=list(adm["table"]), step_ends=list(ends.get(out.req_id, [])), targets=sorted(targets),
            replay=replay, offered=offered, saved=saved, pending=pending, events=evs,
            after=_snapshot_units(cache, (prompt + list(out.token_ids))[:computed]),
            cached_states=cache.num_states(), cached_kv_tokens=cache.num_kv_pages() * HASH_UNIT,
            same_tokens=False, max_diff=float("inf"))
        # retention: every state saved on a block boundary is one the mask keeps (or the replay point);
        # every state inside a block is a reachable target
        keep = dict(zip(step.boundaries(), retention_mask(step.boundaries(), interval, step.reachable())))
        for sv in saved:
            p = sv["pos"]
            if p % BLOCK_SIZE:
                cs.require(partial and p in targets, f"{label}: state inside a block at {p}, not a target {targets}")
            else:
                cs.require(keep.get(p, False) and p in offered, f"{label}: saved {p}, the retention drops it "
                           f"or the mode did not produce it (offered {offered})")
        cs.require(all(p in offered for p in pending if p % BLOCK_SIZE == 0),
                   f"{label}: pending {pending} at a boundary the mode did not produce ({offered})")
        # after the request: the cache holds a state at every saved position, on this request's path
        held = set(step.after_states())
        cs.require(all(sv["pos"] in held for sv in saved), f"{label}: saved {saved}, the cache holds {sorted(held)}")
        toks, logits = ref[k]
        step.same_tokens = list(out.token_ids) == toks
        step.max_diff = cs.max_abs_diff(out.logits, logits)
        cs.require(step.same_tokens and step.max_diff <= MAX_LOGIT_DIFF,
                   f"{label}: cached output differs from the run without cache (max |dlogit| {step.max_diff:.2e})")
        res.steps.append(step)
    cache.check()
    return res
