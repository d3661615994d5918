"""The scenario of the "Speculative decoding" page (``docs/article.md#s0``, the summary table's
speculative-decoding row; ``#s6-4``, the verify kernel).

The trained tiny model runs n-gram speculation once per rollback strategy
(:data:`kda_ref.speculative.STRATEGIES`), each verify step read from the ``spec_verify`` events, every
strategy checked against plain greedy decoding; RecoverSSM's commits are recorded by
:class:`RecordingRecoverSSM`. "Break it" (:func:`run_broken`) rolls back like a KV cache.

Design notes: ``docs/visualizer.md#speculative-decoding``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kda_ref import LLM, ModelConfig, SamplingParams
import torch

from kda_ref.speculative import (NOTHING, SPEC_STATES, STRATEGIES, PerStepStates, RecoverSSM, replay_record_bytes,
                                 rollback_bytes)
from kda_ref.speculative.recoverssm import closed_form_terms
from kda_ref.speculative.rollback import write_state
from kda_ref.trace import SpecVerify, TraceRecorder
from ..scenarios import common as cs

PROMPT = ("| alpha = exp(g) | `kda_ref/ops/gate.py` |\n| alpha = exp(g) | `kda_ref/ops/gate.py` |\n"
          "| alpha =")
MAX_TOKENS = 40
KS = (1, 2, 3, 4, 5)
DEFAULT_K = 4
SAME_TOL = 1e-4


def page_model():
    """The trained tiny model (it has seen the repository's docs, so it repeats their tables)."""
    return cs.trained_model(cs.CHUNK)



@dataclass(frozen=True)
class Lane:
    """What the page says of one rollback strategy: whose mechanism it follows (the lane's label), how its
    lane writes what verified token ``t`` left behind, and its sentence on what it keeps (English; the
    translated lines are the ``spec_decode.*`` strings of ``model_viz/data/strings.<lang>.json``)."""

    origin: str
    symbol: str
    summary: str


# the registered strategies' page text (the engine's strategies carry none: kda_ref.speculative.strategy)
LANES = {
    "per_step": Lane("SGLang", "S{t}", "the verify keeps the state after every token; the commit copies the one "
                     "after the last kept token into the request's slot"),
    "slots": Lane("vLLM", "slot {t}", "each request owns 1 + k slots; the verify writes token t's state into slot t "
                  "and the request continues from the last kept token's slot: nothing is copied"),
    "replay": Lane("SGLang ReplaySSM", "x{t}", "the verify keeps each token's kernel inputs and no state; the "
                   "commit runs the recurrence again over the kept tokens, from the committed state"),
    "recoverssm": Lane("vLLM RecoverSSM, K3", "u{t}", "the verify keeps each token's key, gate and correction "
                       "u_t and never writes the state; the commit sums the kept tokens' k_t u_t^T, each decayed "
                       "by the gates after it, in closed form"),
}


def lane(name: str) -> Lane:
    """Strategy ``name``'s page text; a strategy registered elsewhere gets its name and what its verify
    record keeps (states, or a record per token), read from the strategy object."""
    if name in LANES:
        return LANES[name]
    states = STRATEGIES[name].record.keeps_step_states
    return Lane("", "S{t}" if states else "r{t}", f"a strategy registered outside this package; its verify keeps "
                f"{'the state after every token' if states else 'a record per token and no state'}")


def lane_label(name: str) -> str:
    """A strategy's lane label: its name and whose mechanism it is (proper nouns: the same in every language)."""
    origin = lane(name).origin
    return f"{name} ({origin})" if origin else name


def lane_symbol(name: str, t: int) -> str:
    """What verified token ``t`` left behind in strategy ``name``'s lane (``S3``, ``slot 3``, ``x3``, ``u3``)."""
    return lane(name).symbol.format(t=t)


def summary(name: str) -> str:
    """Strategy ``name``'s sentence on what it keeps and when its state exists (English)."""
    return lane(name).summary


def slots_held(name: str, k: int) -> int:
    """State slots a request holds under strategy ``name`` with ``k`` drafts: its active one and the extra."""
    return 1 + STRATEGIES[name].extra_slots(k)


def lane_keeps(strategy: str, t: int, j: int) -> bool:
    """In the verify figure's lane of ``strategy``: is what verified token ``t`` left still needed when the
    request continues from token ``j``? A strategy whose verify keeps a state per token needs only token
    ``j``'s; one that keeps a record per token (inputs, corrections) needs every record up to ``j``. Asked
    of the strategy object's verify record, never of its name."""
    return t == j if STRATEGIES[strategy].record.keeps_step_states else t <= j


@dataclass
class ClosedForm:
    """One RecoverSSM commit, first KDA layer, all heads: how much each piece of
    ``S_j = Diag(prod alpha) S_0 + sum_t Diag(prod_{s>t} alpha_s) k_t u_t^T`` weighs (Frobenius norms)."""

    kept: int  # verified tokens kept (terms)
    start_norm: float  # ||S_0||, the committed state before the step
    decayed_norm: float  # ||Diag(prod alpha) S_0||
    term_norms: list[float]  # per kept token t: ||Diag(prod_{s>t} alpha_s) k_t u_t^T||
    decay_after: list[float]  # per kept token t: mean over channels of prod_{s>t} alpha_s
    final_norm: float  # ||S_j||
    serial_gap: float  # max |closed form - the serial fold S <- Diag(alpha_t) S + k_t u_t^T|


class RecordingRecoverSSM(RecoverSSM):
    """RecoverSSM that also keeps, for the page, each commit's closed form of request 0 in the first KDA
    layer (a policy hook: ``LLM(spec_state=...)`` takes any strategy object; the commit is the parent's)."""

    def __init__(self):
        self.commits: list[ClosedForm] = []

    def commit(self, pool, out, kept, requests):
        if 0 in kept:
            layer = pool.config.kda_layer_ids[0]
            start = pool.tensors.recurrent[pool.tensors.kda_index[layer], requests[0].slot].clone()
            tr, rows = out.trajectories[layer], torch.tensor(out.spec[0].rows[:kept[0]], dtype=torch.long)
            self.commits.append(closed_form(start, tr.k[rows], tr.g[rows], tr.u[rows]))
        return super().commit(pool, out, kept, requests)


def closed_form(start: torch.Tensor, k: torch.Tensor, g: torch.Tensor, u: torch.Tensor) -> ClosedForm:
    """The page's view of one commit: the pieces of the closed form and its gap to the serial fold."""
    decayed, terms = closed_form_terms(start, k, g, u)  # [HV, K, V], [L, HV, K, V]
    final = decayed + terms.sum(0)
    serial = start.clone()
    if k.shape[1] != u.shape[1]:
        k = k.repeat_interleave(u.shape[1] // k.shape[1], dim=1)
    for t in range(k.shape[0]):  # the recurrence as the corrections see it: decay, then add k_t u_t^T
        serial = serial * g[t].exp().unsqueeze(-1) + k[t].unsqueeze(-1) * u[t].unsqueeze(-2)
    after = (g.cumsum(0)[-1] - g.cumsum(0)).exp()  # [L, HV, K]
    return ClosedForm(kept=k.shape[0], start_norm=float(start.norm()), decayed_norm=float(decayed.norm()),
                      term_norms=[float(x.norm()) for x in terms], decay_after=after.mean((1, 2)).tolist(),
                      final_norm=float(final.norm()), serial_gap=float((final - serial).abs().max()))


@dataclass
class VerifyStep:
    step: int  # engine step
    context: int  # tokens committed before it
    drafts: list[int]
    num_accepted: int
    next_token: int
    kept: int  # verified tokens kept: the last committed token and the kept drafts


@dataclass
class SpecRun:
    k: int
    prompt: list[int]
    tokens: list[int]  # generated, identical for every strategy and for plain decoding (checked)
    steps: list[VerifyStep]
    rollback_bytes: dict[str, int]  # strategy -> peak rollback storage of this run (engine stats)
    state_bytes: int  # one state (all KDA layers) of the page's model
    bytes_48b: dict[str, int]  # strategy -> rollback storage for one request at Kimi-Linear-48B's size
    bytes_k3: dict[str, int]  # ... and at Kimi K3's
    plain_steps: int  # engine steps plain decoding needed for the same tokens
    spec_steps: int  # engine steps with speculation (prefill included)
    record_bytes: int = 0  # replay: one token's inputs, all KDA layers (conv input, k, v, g, beta; fp32)
    per_strategy_steps: dict[str, int] = field(default_factory=dict)
    closed_forms: list[ClosedForm] = field(default_factory=list)  # RecoverSSM's commit of each verify step

    @property
    def mean_accepted_length(self) -> float:
        return sum(s.kept for s in self.steps) / len(self.steps) if self.steps else 0.0


def check_k(k: int) -> int:
    if k not in KS:
        raise ValueError(f"k: must be one of {KS}, got {k!r}")
    return k


def rollback_bytes_at(cfg: ModelConfig, k: int) -> dict[str, int]:
    """Rollback storage for one speculating request at ``cfg``'s size, per strategy
    (:func:`kda_ref.speculative.rollback_bytes`)."""
    return {s: rollback_bytes(cfg, k, s) for s in SPEC_STATES}


def _tokens_of_prompt(model) -> list[int]:
    from kda_ref.tokenizer import ByteTokenizer

    return [model.config.bos_token_id, *ByteTokenizer().encode(PROMPT)]  # the trained model always saw BOS first


def run(k: int = DEFAULT_K) -> SpecRun:
    """The request with each rollback strategy and without speculation; the verify steps as traced."""
    check_k(k)
    model = page_model()
    prompt = _tokens_of_prompt(model)
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, return_logits=True)
    plain_llm = LLM(model, chunk_size=cs.CHUNK)
    plain = plain_llm.generate([prompt], params)[0]
    runs, steps_of, rollback, recording = {}, {}, {}, RecordingRecoverSSM()
    for state in SPEC_STATES:
        rec = TraceRecorder()
        strategy = recording if isinstance(STRATEGIES[state], RecoverSSM) else state
        llm = LLM(model, chunk_size=cs.CHUNK, speculative="ngram", num_speculative_tokens=k, spec_state=strategy,
                  tracer=rec)
        out = llm.generate([prompt], params)[0]
        cs.require(out.token_ids == plain.token_ids, f"{state}: speculation changed the tokens")
        drift = float((out.logits - plain.logits).abs().max())
        cs.require(drift <= SAME_TOL, f"{state}: speculation moved the logits by {drift:.2e}")
        runs[state] = [VerifyStep(e.step, e.context_len, list(e.drafts), e.num_accepted, e.next_token, e.kept)
                       for e in rec.events if isinstance(e, SpecVerify)]
        steps_of[state] = llm.stats()["steps"]
        rollback[state] = llm.stats()["spec_state_bytes"]
    first = runs[SPEC_STATES[0]]
    widest = 1 + max((len(st.drafts) for st in first), default=0)
    cs.require(rollback["replay"] == widest * replay_record_bytes(model.config),
               "the engine's replay storage is not 1 + k token records")
    cs.require(all([(s.drafts, s.kept) for s in r] == [(s.drafts, s.kept) for s in first] for r in runs.values()),
               "the strategies verified different drafts")
    cs.require(len(recording.commits) == len(first), "RecoverSSM committed a different number of verify steps")
    cs.require(all(c.serial_gap <= SAME_TOL * max(1.0, c.final_norm) for c in recording.commits),
               "RecoverSSM's closed form left the serial fold of its corrections")
    return SpecRun(k=k, prompt=prompt, tokens=list(plain.token_ids), steps=first, rollback_bytes=rollback,
                   state_bytes=plain_llm.pool.sizes.state_bytes,
                   bytes_48b=rollback_bytes_at(ModelConfig.kimi_linear_48b(), k),
                   bytes_k3=rollback_bytes_at(ModelConfig.kimi_k3(), k), plain_steps=plain_llm.stats()["steps"],
                   spec_steps=steps_of[SPEC_STATES[0]], record_bytes=replay_record_bytes(model.config),
                   per_strategy_steps=steps_of, closed_forms=recording.commits)


@dataclass
class BrokenRun:
    k: int
    tokens: list[int]  # what the wrongly rolled-back engine generated
    reference: list[int]  # plain greedy decoding
    first_divergence: int | None  # index of the first differing token
    first_rejection: int | None  # output index of the first token computed from the wrong state
    drift: list[float] = field(default_factory=list)  # per output token: max |logit - greedy logit| (up to divergence)

    @property
    def diverged(self) -> bool:
        return self.first_divergence is not None


class KeepEveryDraft(PerStepStates):
    """Deliberately wrong rollback, as a KV cache would do it: the tokens are kept as the target decided,
    but the state after *every* verified draft survives, rejected ones included. A public policy hook
    (``LLM(spec_state=...)`` takes any :class:`~kda_ref.speculative.RollbackStrategy`)."""

    def commit(self, pool, out, kept, requests):
        for n in kept:
            write_state(pool, out, n, len(out.spec[n].rows) - 1, requests[n].slot)
        return NOTHING


def run_broken(k: int = DEFAULT_K) -> BrokenRun:
    """Roll back like a KV cache: keep the state after every draft, rejected ones included."""
    check_k(k)
    model = page_model()
    prompt = _tokens_of_prompt(model)
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, return_logits=True)
    ref_out = LLM(model, chunk_size=cs.CHUNK).generate([prompt], params)[0]
    ref = ref_out.token_ids
    rec = TraceRecorder()
    llm = LLM(model, chunk_size=cs.CHUNK, speculative="ngram", num_speculative_tokens=k, spec_state=KeepEveryDraft(),
              tracer=rec)
    out = llm.generate([prompt], params)[0]
    toks = out.token_ids
    first = next((i for i, (a, b) in enumerate(zip(toks, ref)) if a != b), None)
    upto = len(toks) if first is None else first + 1  # logits are comparable up to the first different token
    drift = [float((out.logits[i] - ref_out.logits[i]).abs().max()) for i in range(upto)]
    # the output index of the first token computed from the wrong state: the step after the first
    # rejection (that step's own tokens came from correct logits)
    rejection = next((e.context_len + e.kept - len(prompt) + 1 for e in rec.events
                      if isinstance(e, SpecVerify) and e.rejected > 0), None)
    if rejection is not None:  # from the first token computed from the wrong state on, the logits move
        cs.require(max(drift[rejection:], default=1.0) > 1e-3 and max(drift[:rejection]) <= SAME_TOL,
                   "keeping the state after rejected drafts did not move the logits")
    return BrokenRun(k=k, tokens=list(toks), reference=list(ref), first_divergence=first,
                     first_rejection=rejection, drift=drift)


# ---- the second view: PAD rows of a static decode bucket ------------------------------------------------
STATIC_REQUESTS = (1, 2, 3, 4, 5, 6)
DEFAULT_STATIC_REQUESTS = 3
STATIC_PROMPTS = ("| alpha = exp(g) |", "KDA keeps a state", "MLA keeps KV", "a chunk is 64 tokens",
                  "slots and pages", "the radix tree")


@dataclass
class BucketStep:
    step: int
    bucket: int  # rows the step ran (live + PAD)
    num_seqs: int  # live rows
    pages: int
    state_indices: list[int]  # [bucket], PAD rows -1
    context_lens: list[int]
    block_table: list[list[int]]


@dataclass
class StaticView:
    num_requests: int
    steps: list[BucketStep]  # every decode step, as the engine's graph_bucket events report it
    sizes: tuple[int, ...]  # the engine's bucket sizes
    max_tokens: list[int]  # per request: they finish at different steps, so the bucket shrinks
    pad_units_untouched: bool  # the PAD slot and page still hold zeros after every padded step


def static_view(num_requests: int = DEFAULT_STATIC_REQUESTS) -> StaticView:
    """``num_requests`` requests on ``LLM(static_decode=True)`` (the trained model), traced; the same
    tokens as dynamic decoding (checked) and the PAD unit (slot 0, page 0) all zeros (checked)."""
    if num_requests not in STATIC_REQUESTS:
        raise ValueError(f"num_requests: must be one of {STATIC_REQUESTS}, got {num_requests!r}")
    from kda_ref.tokenizer import ByteTokenizer
    from kda_ref.trace import GraphBucket

    model = page_model()
    tok = ByteTokenizer()
    prompts = [[model.config.bos_token_id, *tok.encode(p)] for p in STATIC_PROMPTS[:num_requests]]
    max_tokens = [4 + 3 * i for i in range(num_requests)]
    params = [SamplingParams(max_tokens=m, ignore_eos=True) for m in max_tokens]
    dynamic = LLM(model, chunk_size=cs.CHUNK).generate(prompts, params)
    rec = TraceRecorder()
    llm = LLM(model, chunk_size=cs.CHUNK, static_decode=True, max_num_seqs=8, tracer=rec)
    t = llm.pool.tensors
    static = llm.generate(prompts, params)
    cs.require([o.token_ids for o in static] == [o.token_ids for o in dynamic],
               "static decode changed the tokens")
    untouched = not any(bool(x[:, 0].any()) for x in (t.recurrent, t.conv, t.kv))
    cs.require(untouched, "the PAD unit (slot 0, page 0) no longer holds zeros")
    steps = [BucketStep(e.step, e.bucket, e.num_seqs, e.pages, list(e.state_indices), list(e.context_lens),
                        [list(r) for r in e.block_table]) for e in rec.events if isinstance(e, GraphBucket)]
    return StaticView(num_requests=num_requests, steps=steps, sizes=llm.runner.static.sizes, max_tokens=max_tokens,
                      pad_units_untouched=untouched)

