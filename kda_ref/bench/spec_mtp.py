"""MTP drafts against n-gram drafts on the trained K3 demo: acceptance and decode speed, per strategy.

    kda-ref bench spec-mtp [--new-tokens 96] [--ks 1 2 3 4] [--repeats 5] [--torch-compile [--compile-gemm]] [--out FILE]

The trained K3 demo (``kda_ref/assets/trained_k3``), greedy, one request at a time, on the ``repetitive``,
``random`` and ``held-out`` workloads: plain decoding, then n-gram and MTP speculation for every ``k`` and every
registered rollback strategy, each row the best of ``--repeats``; every speculative run's tokens checked against
plain decoding's. Nothing here asserts a timing.
Design notes: ``docs/benchmarks.md#mtp-drafts-columns-and-compiling``
"""

from __future__ import annotations

import statistics

import torch
from tqdm import tqdm

from ..engine import LLM
from ..speculative import SPEC_STATES
from .report import md_table, or_dash, report
from .spec_common import timed_request, workloads


def measure_mtp(new_tokens: int = 96, ks=(1, 2, 3, 4), repeats: int = 5, states=SPEC_STATES,
                torch_compile: bool = False, compile_gemm: bool = False) -> list[dict]:
    """The table of the module docstring; ``torch_compile``: every engine with ``static_decode=True,
    torch_compile=True`` (each warmed up by two untimed runs, which compile its buckets), against plain
    decoding in the same mode; ``compile_gemm``: every engine's steps also through the C++ GEMM template
    (``LLM(compile_gemm=True)``; each engine compiles for 1-3 minutes on the 2-core machine)."""
    from ..train import load_trained

    if new_tokens < 2:
        raise ValueError(f"new_tokens: decode tok/s needs at least 2 tokens per request, got {new_tokens}")
    torch.set_num_threads(2)
    model = load_trained(kind="k3")
    configs = [("plain", None, None)] + [(m, k, s) for m in ("ngram", "mtp") for k in ks for s in states]
    if compile_gemm and not torch_compile:
        raise ValueError("compile_gemm: chooses how torch_compile compiles; pass torch_compile=True with it")
    mode = dict(static_decode=True, torch_compile=True, compile_gemm=compile_gemm) if torch_compile else {}
    # one engine per row for every workload: a compiled engine compiles its buckets once (the prompts are
    # of one length, so every workload runs the same bucket shapes)
    engines = [LLM(model, **mode) if m == "plain" else
               LLM(model, speculative=m, num_speculative_tokens=k, spec_state=s, **mode) for m, k, s in configs]
    rows = []
    for name, text in mtp_workloads().items():
        prompt = [model.config.bos_token_id, *(list(text.encode()) if isinstance(text, str) else text)]
        rows += _workload_rows(name, prompt, configs, engines, new_tokens, repeats, torch_compile)
    return [{**r, "compile_gemm": compile_gemm} for r in rows]


def _workload_rows(name: str, prompt: list[int], configs, engines, new_tokens: int, repeats: int,
                   torch_compile: bool) -> list[dict]:
    """One workload's rows: every engine warmed up (compiled: two untimed runs), then ``repeats`` rounds
    alternating the engines; counters taken from after the warm-up."""
    for llm in engines if torch_compile else ():
        for _ in range(2):
            timed_request(llm, prompt, new_tokens)
    times = [[] for _ in configs]
    tokens = [None] * len(configs)
    before = [dict(llm.stats()) for llm in engines]
    for _ in tqdm(range(repeats), desc=f"mtp bench, {name}"):
        for i, llm in enumerate(engines):
            _, decode_s, toks, _ = timed_request(llm, prompt, new_tokens)
            times[i].append(decode_s)
            tokens[i] = toks
    base, rows = min(times[0]), []
    for (m, k, s), llm, ts, toks, st0 in zip(configs, engines, times, tokens, before):
        st = {key: v - st0.get(key, 0) if isinstance(v, (int, float)) else v for key, v in llm.stats().items()}
        st["spec_accepted_per_pos"] = _minus(llm.stats().get("spec_accepted_per_pos", ()),
                                             st0.get("spec_accepted_per_pos", ()))
        steps = st.get("spec_verify_steps", 0)
        rows.append({"workload": name, "method": m, "k": k, "spec_state": s, "torch_compile": torch_compile,
                     **step_times(st0, llm.stats(), sum(ts), repeats * (new_tokens - 1)),
                     "decode_tok_s": (new_tokens - 1) / min(ts), "decode_tok_s_median": (new_tokens - 1) / statistics.median(ts),
                     "x_plain": base / min(ts), "same_tokens": toks == tokens[0], "verify_steps": steps,
                     "tokens_per_verify": (1 + st["spec_accepted_tokens"] / steps) if steps else None,
                     "acceptance": (st["spec_accepted_tokens"] / st["spec_draft_tokens"]) if steps else None,
                     "by_depth": depth_acceptance(st)})
    return rows


def _minus(after, before) -> list[int]:
    """Per-position counters after less before (a missing position counts 0)."""
    before = list(before) + [0] * (len(after) - len(before))
    return [a - b for a, b in zip(after, before)]


def mtp_workloads() -> dict[str, str | list[int]]:
    """The workloads of :mod:`kda_ref.bench.spec` and ``held-out``: the first 300 bytes of the K3 demo's
    held-out prose (its corpus snapshot's held-out part: text it never trained on)."""
    from ..train import trained_corpus

    return {**workloads(), "held-out": list(trained_corpus("k3").held_out[:300])}


def step_times(before: dict, after: dict, decode_s: float, tokens: int) -> dict:
    """Milliseconds of one draft (the drafter's ``propose``), and of one decode step -- for plain decoding, the
    decode seconds over its tokens; with drafts, a verify step with its host work: the decode seconds less
    the drafts', over the verify steps (each step of a single request verifies)."""
    d = {k: after.get(k, 0) - before.get(k, 0) for k in ("spec_draft_calls", "spec_draft_seconds", "spec_verify_steps")}
    if not d["spec_verify_steps"]:
        return {"draft_ms": None, "step_ms": 1000 * decode_s / max(1, tokens)}
    return {"draft_ms": 1000 * d["spec_draft_seconds"] / max(1, d["spec_draft_calls"]),
            "step_ms": 1000 * (decode_s - d["spec_draft_seconds"]) / d["spec_verify_steps"]}


def depth_acceptance(stats: dict) -> list[float]:
    """Per depth ``d``, the share of verifies whose draft at depth ``d`` was accepted given the one at ``d - 1``
    was (``spec_accepted_per_pos``): the first draft's acceptance, then each chained draft's."""
    per_pos, steps = stats.get("spec_accepted_per_pos", ()), stats.get("spec_verify_steps", 0)
    reached = [steps, *per_pos[:-1]]
    return [n / r if r else 0.0 for n, r in zip(per_pos, reached)]


def to_markdown(rows: list[dict]) -> str:
    def cells(r):
        method = r["method"] + (", compiled" if r.get("torch_compile") else "") + (" (C++ GEMM)" if r.get("compile_gemm") else "")
        acc = "—" if r["acceptance"] is None else f"{100 * r['acceptance']:.0f} %"
        return [r["workload"], method, r["k"] or "—", r["spec_state"] or "—", f"{r['decode_tok_s']:.0f}",
                f"{r['x_plain']:.2f}", or_dash(r["tokens_per_verify"], ".2f"), acc,
                " / ".join(f"{100 * a:.0f} %" for a in r.get("by_depth") or ()) or "—",
                or_dash(r.get("draft_ms"), ".2f"), or_dash(r.get("step_ms"), ".2f")]

    return md_table(["workload", "drafts", "k", "spec_state", "decode tok/s", "x plain", "tokens / verify",
                     "drafts accepted", "accepted by depth", "draft ms", "decode / verify step ms"], map(cells, rows))



def cli(a) -> None:
    """The benchmark with parsed arguments (``kda-ref bench spec-mtp`` parses them before importing this)."""
    states = tuple(a.states) if a.states else (("per_step",) if a.torch_compile else SPEC_STATES)
    rows = measure_mtp(a.new_tokens, tuple(a.ks), a.repeats, states, torch_compile=a.torch_compile,
                       compile_gemm=a.compile_gemm)
    report(a, rows, to_markdown(rows))


if __name__ == "__main__":  # as `kda-ref bench spec-mtp` runs it
    from .entry import script

    raise SystemExit(script("spec-mtp"))
