"""Speculative decoding: decode tokens/s and tokens per verify step, with and without speculation.

    python -m kda_ref.bench.spec [--new-tokens 128] [--ks 3 5] [--repeats 3] [--torch-compile] [--out docs/bench/spec.json]

The trained tiny model (``kda_ref/assets/trained_tiny``), greedy, one request at a time, on the ``repetitive`` and
``random`` workloads: plain decoding, then n-gram speculation for every ``k`` and every registered rollback
strategy, each speculative run's tokens checked against plain decoding's. Also :func:`measure_tree`,
:func:`measure_static`, :func:`measure_verify_cost`, :mod:`kda_ref.bench.spec_commit` and
:mod:`kda_ref.bench.spec_mtp`. Benchmarks measure; nothing here asserts a timing.
Design notes: ``docs/benchmarks.md#speculative-decoding``;
method: ``docs/benchmarks.md#speculative-decoding-what-one-run-reports``
"""

from __future__ import annotations

import statistics
import time

import torch
from tqdm import tqdm

from ..engine import LLM, SamplingParams
from ..engine.static_decode import cpp_compiler
from ..model import ModelConfig
from ..model.verify_record import KEEP_STATES
from ..speculative import SPEC_STATES, SpecConfig, rollback_bytes
from .report import md_table, or_dash, report
from .spec_common import timed_request, workloads



def measure(new_tokens: int = 128, ks=(3, 5), repeats: int = 3, lookup_mins=(), torch_compile: bool = False) -> list[dict]:
    """The main table: plain decoding, then n-gram speculation for every ``k`` and every rollback
    strategy with the default ``prompt_lookup_min`` (1), and for each of ``lookup_mins`` with
    ``per_step`` (the shortest suffix that may be matched: longer ones draft less often, and better).
    ``torch_compile``: also plain decoding, ``per_step`` speculation (every ``k``, every lookup
    min) and ``slots`` (every ``k``) with ``static_decode=True, torch_compile=True``, each engine warmed up by two runs of its
    workload (which compile its buckets). ``decode_speedup`` is against the default plain engine,
    ``decode_speedup_same_mode`` against plain decoding with the same ``torch_compile``."""
    from ..train import load_trained

    if new_tokens < 2:
        raise ValueError(f"new_tokens: decode tok/s needs at least 2 tokens per request, got {new_tokens}")
    torch.set_num_threads(2)
    prompts = workloads()
    engines = _spec_engines(load_trained(), prompts, _spec_configs(ks, lookup_mins, torch_compile), new_tokens)
    times = {key: [] for key in engines}
    decode_times = {key: [] for key in engines}
    result = {}
    for _ in tqdm(range(repeats), desc="repeats"):
        for key, llm in engines.items():  # alternate the rows within each repeat
            steps_before = llm.stats()["steps"]
            dt, dec, toks, metrics = timed_request(llm, prompts[key[0]], new_tokens)
            times[key].append(dt)
            decode_times[key].append(dec)
            stats = llm.stats()
            result[key] = (toks, metrics, stats, stats["steps"] - steps_before)
    rows = [_spec_row(key, result, times[key], decode_times[key], new_tokens) for key in engines]
    _add_speedups(rows, new_tokens)
    return rows


def _spec_configs(ks, lookup_mins, torch_compile: bool) -> list[tuple]:
    """:func:`measure`'s rows as ``(method, k, spec_state, prompt_lookup_min, torch_compile)``."""
    default_min = SpecConfig().prompt_lookup_min
    mins = sorted(set(lookup_mins) - {default_min})
    configs = [("plain", None, None, None, False)] + [("ngram", k, s, default_min, False) for k in ks for s in SPEC_STATES]
    configs += [("ngram", k, "per_step", n, False) for n in mins for k in ks]
    if torch_compile:
        configs += [("plain", None, None, None, True)]
        configs += [("ngram", k, "per_step", n, True) for n in [default_min, *mins] for k in ks]
        configs += [("ngram", k, "slots", default_min, True) for k in ks]  # its verify writes the slots itself
    return configs


def _spec_engines(model, prompts: dict, configs: list[tuple], new_tokens: int) -> dict:
    """One engine per (workload, row), warmed up (compiled ones compile their buckets here)."""
    engines = {}
    for w in tqdm(prompts, desc="engines (compiled ones compile here)"):
        for name, k, s, n, c in configs:
            kw = {} if name == "plain" else dict(speculative="ngram", num_speculative_tokens=k, spec_state=s,
                                                 prompt_lookup_min=n)
            llm = engines[(w, name, k, s, n, c)] = LLM(model, static_decode=c, torch_compile=c, **kw)
            llm.generate([[1, 2, 3]], SamplingParams(max_tokens=4), use_tqdm=False)
            for _ in range(2 if c else 0):  # a bucket runs eagerly at its first use and compiles at its second
                timed_request(llm, prompts[w], new_tokens)
    return engines


def _spec_row(key, result: dict, times: list[float], decode_times: list[float], new_tokens: int) -> dict:
    """One row of :func:`measure` (its tokens checked against plain decoding's)."""
    w, name, k, s, n, c = key
    toks, metrics, stats, steps = result[key]
    same = toks == result[(w, "plain", None, None, None, False)][0]
    if not same:
        raise AssertionError(f"{w} / {name} k={k} {s} min n={n} compile={c}: speculation changed the tokens")
    best, med = min(times), statistics.median(times)
    return {"workload": w, "method": name, "k": k, "spec_state": s, "prompt_lookup_min": n, "torch_compile": c,
            "decode_tok_s": (new_tokens - 1) / min(decode_times),
            "decode_tok_s_median": (new_tokens - 1) / statistics.median(decode_times),
            "tok_s": new_tokens / best, "tok_s_median": new_tokens / med,
            "mean_accepted_length": metrics.get("spec_mean_accepted_length"),
            "rollback_bytes": stats.get("spec_state_bytes", 0),
            "rollback_bytes_48b": rollback_bytes(ModelConfig.kimi_linear_48b(), k, s) if k else 0,
            "same_tokens": same, "steps": steps}


def _add_speedups(rows: list[dict], new_tokens: int) -> None:
    """Each row's decode steps, ceiling and speed-ups against plain decoding (default and same mode)."""
    base = {(r["workload"], r["torch_compile"]): r for r in rows if r["method"] == "plain"}
    for r in rows:
        plain, plain_same = base[(r["workload"], False)], base[(r["workload"], r["torch_compile"])]
        # plain decoding runs one step per token after the first: the rest of its steps are the prefill's
        prefill_steps = plain["steps"] - (new_tokens - 1)
        r["decode_steps"] = r["steps"] - prefill_steps
        r["ceiling"] = (new_tokens - 1) / r["decode_steps"]  # x plain if a verify step cost a decode step
        r["decode_speedup"] = r["decode_tok_s"] / plain["decode_tok_s"]
        r["decode_speedup_same_mode"] = r["decode_tok_s"] / plain_same["decode_tok_s"]
        r["speedup"] = r["tok_s"] / plain["tok_s"]

STATIC_MODES = ("dynamic", "static", "static+compile")


def _prefill_then_time_decode(llm: LLM, prompts: list[list[int]], new_tokens: int) -> tuple[float, list[list[int]]]:
    """Queue ``prompts``, run the steps until every prompt is prefilled (untimed), then time the decode
    steps to the end: ``(seconds, each request's tokens)``."""
    ids = [llm.add_request(p, SamplingParams(max_tokens=new_tokens + 1, ignore_eos=True)) for p in prompts]
    while any(r.num_computed_tokens < len(r.prompt_token_ids) for r in llm.scheduler.running) \
            or llm.scheduler.waiting:
        llm.step()  # the prefills (and the first token of each request)
    done = {}
    t0 = time.perf_counter()
    while llm.has_unfinished():
        for o in llm.step():
            done[o.req_id] = o.token_ids
    return time.perf_counter() - t0, [done[i] for i in ids]


def measure_static(batches=(1, 8), new_tokens: int = 64, prompt_len: int = 256, repeats: int = 3,
                   modes=None) -> list[dict]:
    """Plain decoding tokens/s per batch size (the tiny model, random weights) in each of ``modes``:
    ``dynamic``, ``static`` (``static_decode=True``) and ``static+compile`` (also ``torch_compile=True``;
    left out by default where no C++ compiler is found). ``B`` prompts of ``prompt_len`` tokens; decode
    tok/s = ``B * new_tokens`` / the time of the steps after every prefill, best of ``repeats``
    alternating runs, each mode's engine built once and warmed up by two untimed runs (a bucket runs
    eagerly first and compiles at its second use: ``compile_s``). Tokens checked equal across modes,
    the warm-up runs' too."""
    if modes is None:
        modes = STATIC_MODES if cpp_compiler() is not None else STATIC_MODES[:2]
    unknown = set(modes) - set(STATIC_MODES)
    if unknown or "dynamic" not in modes:
        raise ValueError(f"modes: need 'dynamic' and only {STATIC_MODES}, got {tuple(modes)}")
    modes = ["dynamic", *(m for m in modes if m != "dynamic")]  # the reference runs first
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    prompts = {B: [torch.randint(0, 256, (prompt_len,), generator=g).tolist() for _ in range(B)] for B in batches}
    engines = {(B, m): LLM(ModelConfig.tiny(), seed=0, static_decode=m != "dynamic",
                           torch_compile=m == "static+compile", max_num_seqs=max(batches))
               for B in batches for m in modes}
    times, tokens = {}, {}
    for (B, m), llm in tqdm(engines.items(), desc="static decode warm-up (compiles)"):
        for _ in range(2):
            _, toks = _prefill_then_time_decode(llm, prompts[B], new_tokens)
            ref = tokens.setdefault((B, "dynamic"), toks)  # the dynamic engine warms up first
            if toks != ref:
                raise AssertionError(f"batch {B}: {m} decode changed the tokens (warm-up)")
    for _ in tqdm(range(repeats), desc="static vs dynamic"):
        for (B, m), llm in engines.items():  # alternate the modes within each repeat
            dt, toks = _prefill_then_time_decode(llm, prompts[B], new_tokens)
            times.setdefault((B, m), []).append(dt)
            if toks != tokens[(B, "dynamic")]:
                raise AssertionError(f"batch {B}: {m} decode changed the tokens")
    rows = []
    for (B, m), ts in times.items():
        static = engines[(B, m)].runner.static
        rows.append({"batch": B, "mode": m, "static_decode": m != "dynamic", "torch_compile": m == "static+compile",
                     "tok_s": B * new_tokens / min(ts), "tok_s_median": B * new_tokens / statistics.median(ts),
                     "compile_s": sum(b.compile_s for b in static.buckets.values()) if static else 0.0})
    base = {r["batch"]: r["tok_s"] for r in rows if r["mode"] == "dynamic"}
    for r in rows:
        r["x_dynamic"] = r["tok_s"] / base[r["batch"]]
    return rows


def measure_tree(new_tokens: int = 128, k: int = 4, widths=(1, 2, 3, 4), repeats: int = 3) -> list[dict]:
    """N-gram speculation with ``per_step`` on the repetitive workload, a chain (width 1) against
    draft trees of growing width: decode tok/s, tokens per verify step, draft nodes per verify step.
    Tokens checked against plain decoding."""
    from ..train import load_trained

    torch.set_num_threads(2)
    model = load_trained()
    prompt = workloads()["repetitive"]
    engines = {0: LLM(model)}
    for w in widths:
        engines[w] = LLM(model, speculative="ngram", num_speculative_tokens=k, spec_state="per_step",
                         **({"spec_tree_width": w} if w > 1 else {}))
    for llm in engines.values():
        llm.generate([[1, 2, 3]], SamplingParams(max_tokens=4))
    times = {w: [] for w in engines}
    result = {}
    for _ in tqdm(range(repeats), desc="repeats"):
        for w, llm in engines.items():
            before = dict(llm.stats())
            _, dt, toks, metrics = timed_request(llm, prompt, new_tokens)
            times[w].append(dt)
            after = llm.stats()
            steps = after.get("spec_verify_steps", 0) - before.get("spec_verify_steps", 0)
            nodes = after.get("spec_draft_tokens", 0) - before.get("spec_draft_tokens", 0)
            result[w] = (toks, metrics.get("spec_mean_accepted_length"), nodes / steps if steps else None)
    rows = []
    for w in widths:
        toks, acc, nodes = result[w]
        if toks != result[0][0]:
            raise AssertionError(f"tree width {w}: speculation changed the tokens")
        rows.append({"width": w, "k": k, "decode_tok_s": (new_tokens - 1) / min(times[w]),
                     "decode_tok_s_median": (new_tokens - 1) / statistics.median(times[w]),
                     "x_plain": min(times[0]) / min(times[w]),
                     "mean_accepted_length": acc, "nodes_per_verify": nodes})
    return rows


def measure_verify_cost(max_tokens: int = 9, iters: int = 200, prompt_len: int = 300, static: bool = False,
                        compile: bool = False) -> list[dict]:
    """What one verify step of ``L`` tokens costs against one decode step, model forward only (the
    trained model, one sequence after a ``prompt_len``-token prefill, the fused decode and verify
    steps of :meth:`HybridModel.forward_batch`), for ``L = 1 .. max_tokens``; the steps alternate
    within each of ``iters`` rounds and each row is the 10th percentile (the quiet end of a shared
    machine's noise) with the median beside it. ``x_decode`` is also the number of
    tokens a verify step of that length must yield on average just to keep up with plain decoding,
    and ``1.5 * x_decode`` what it must yield for a 1.5x speed-up (engine overhead aside).
    ``static``: the static buckets' steps instead (:meth:`StaticDecode.run`: the metadata refill, the
    fixed-shape step, the live rows), ``compile``: compiled (``torch_compile=True``; each length's
    bucket is compiled before the timing)."""
    from ..train import load_trained

    torch.set_num_threads(2)
    model = load_trained()
    if static:
        return _static_verify_cost(model, max_tokens, iters, prompt_len, compile)
    from ..model import RequestCache

    g = torch.Generator().manual_seed(0)
    cache = RequestCache(model.config, 1, max_tokens=prompt_len + max_tokens + 1)
    with torch.inference_mode():  # as the engine's runner
        b = cache.batch([prompt_len])
        model.forward_batch(torch.randint(0, 256, (prompt_len,), generator=g), b, cache.tensors)
    cache.advance(b)
    steps = {}  # L -> (input_ids, batch, logits rows); a verify step reads the state and writes KV rows only
    for L in range(1, max_tokens + 1):
        kw = {} if L == 1 else dict(verify=True, verify_keep=KEEP_STATES)
        steps[L] = (torch.randint(0, 256, (L,), generator=g), cache.batch([L], **kw), torch.arange(L))
    times = {L: [] for L in steps}
    with torch.inference_mode():
        for _ in tqdm(range(iters), desc="verify cost"):
            for L, (ids, batch, rows) in steps.items():
                t0 = time.perf_counter()
                model.forward_batch(ids, batch, cache.tensors, logits=rows if L > 1 else "last")
                times[L].append(time.perf_counter() - t0)
    return _cost_rows(times, "eager")


def _static_verify_cost(model, max_tokens: int, iters: int, prompt_len: int, compile: bool) -> list[dict]:
    """:func:`measure_verify_cost` over the static buckets: one request prefilled by an engine with
    ``static_decode=True``, then its buckets of ``L`` tokens run directly (a decode bucket writes the
    request's state; a verify bucket with ``per_step``'s record reads it and writes KV rows only)."""
    from ..memory import PageKind

    llm = LLM(model, static_decode=True, torch_compile=compile, max_num_seqs=1)
    g = torch.Generator().manual_seed(0)
    llm.add_request(torch.randint(0, 256, (prompt_len,), generator=g).tolist(),
                    SamplingParams(max_tokens=2, ignore_eos=True))
    llm.step()  # the prefill
    req, st = llm.scheduler.running[0], llm.runner.static
    ctx, ps = req.num_computed_tokens, llm.pool.tensors.page_size
    extra = (ctx + max_tokens) // ps + 1 - len(req.pages)  # pages for the L new tokens
    table = req.pages + (llm.pool.alloc(PageKind.MLA_KV, extra, owner=req.req_id) if extra > 0 else [])
    dispatcher = llm.model.dispatcher.with_hook(None)
    steps = {L: [torch.randint(0, 256, (L,), generator=g).tolist()] for L in range(1, max_tokens + 1)}

    def run(L: int):
        return st.run(steps[L], [ctx], [req.slot], [table], dispatcher, None if L == 1 else KEEP_STATES)

    times = {L: [] for L in steps}
    with torch.inference_mode():
        for L in tqdm(steps, desc="buckets (compiled ones compile here)"):
            for _ in range(3 if compile else 1):  # a compiled bucket runs eagerly once, compiles at its second run
                run(L)
        for _ in tqdm(range(iters), desc="verify cost"):
            for L in steps:
                t0 = time.perf_counter()
                _, info = run(L)
                times[L].append(time.perf_counter() - t0)
    if compile and info.mode != "compiled":
        raise RuntimeError(f"static verify cost: the buckets ran {info.mode}, not compiled (no C++ compiler?)")
    return _cost_rows(times, "static, compiled" if compile else "static")


def _cost_rows(times: dict[int, list[float]], mode: str) -> list[dict]:
    def p10(ts: list[float]) -> float:
        return sorted(ts)[len(ts) // 10]

    base = p10(times[1])
    return [{"tokens": L, "mode": mode, "ms": p10(ts) * 1e3, "ms_median": statistics.median(ts) * 1e3,
             "x_decode": p10(ts) / base} for L, ts in times.items()]


def verify_cost_to_markdown(rows: list[dict]) -> str:
    return md_table(["step", "tokens per step (1 + k)", "ms", "x decode step = tokens / verify to break even",
                     "tokens / verify for 1.5x"],
                    ([r["mode"], "1 (decode)" if r["tokens"] == 1 else r["tokens"], f"{r['ms']:.2f}",
                      f"{r['x_decode']:.2f}", f"{1.5 * r['x_decode']:.2f}"] for r in rows))


def tree_to_markdown(rows: list[dict]) -> str:
    return md_table(["draft", "k", "decode tok/s", "x plain", "tokens / verify", "draft nodes / verify"],
                    (["chain" if r["width"] == 1 else f"tree, width {r['width']}", r["k"], f"{r['decode_tok_s']:.0f}",
                      f"{r['x_plain']:.2f}", or_dash(r["mean_accepted_length"], ".2f"),
                      or_dash(r["nodes_per_verify"], ".1f")] for r in rows))


def static_to_markdown(rows: list[dict]) -> str:
    return md_table(["batch", "decode", "tok/s", "x dynamic", "compile s"],
                    ([r["batch"], r["mode"], f"{r['tok_s']:.0f}", f"{r['x_dynamic']:.2f}", f"{r['compile_s']:.0f}"]
                     for r in rows))


def to_markdown(rows: list[dict]) -> str:
    default_min = SpecConfig().prompt_lookup_min

    def cells(r):
        n = r.get("prompt_lookup_min")
        method = r["method"] if n in (None, default_min) else f"{r['method']}, n >= {n}"
        method += ", compiled" if r.get("torch_compile") else ""
        return [r["workload"], method, r["k"] or "—", r["spec_state"] or "—", f"{r['decode_tok_s']:.0f}",
                f"{r['decode_speedup']:.2f}", f"{r['decode_speedup_same_mode']:.2f}", f"{r['tok_s']:.0f}",
                f"{r['speedup']:.2f}", or_dash(r["mean_accepted_length"], ".2f"), r["decode_steps"],
                f"{r['ceiling']:.2f}", f"{r['rollback_bytes'] / 1024:,.0f} KiB",
                f"{r['rollback_bytes_48b'] / 2**20:,.1f} MiB"]

    return md_table(["workload", "method", "k", "spec_state", "decode tok/s", "x plain", "x plain, same mode",
                     "request tok/s (prefill incl.)", "x plain", "tokens / verify", "decode steps", "ceiling",
                     "rollback (this model)", "rollback at 48B"], map(cells, rows))



def cli(a) -> None:
    """The benchmark with parsed arguments (``kda-ref bench spec`` parses them before importing this)."""
    rows = measure(a.new_tokens, tuple(a.ks), a.repeats, tuple(a.lookup_mins), torch_compile=a.torch_compile)
    print(to_markdown(rows))
    tree = measure_tree(a.new_tokens, widths=tuple(a.tree_widths), repeats=a.repeats) if a.tree_widths else []
    if tree:
        print()
        print(tree_to_markdown(tree))
    static = measure_static(repeats=a.repeats)
    print()
    print(static_to_markdown(static))
    cost = measure_verify_cost(max(a.ks) + 1)
    if a.torch_compile:
        cost += measure_verify_cost(max(a.ks) + 1, static=True, compile=True)
    print()
    print(verify_cost_to_markdown(cost))
    from .spec_commit import commit_cost_to_markdown, measure_commit_cost

    commit = measure_commit_cost(k=max(a.ks))
    print()
    print(commit_cost_to_markdown(commit))
    from . import spec_mtp

    mtp = spec_mtp.measure_mtp(a.new_tokens, tuple(sorted({1, *a.ks})), a.repeats)
    print()
    report(a, {"speculative": rows, "tree": tree, "static_decode": static, "verify_cost": cost,
               "commit_cost": commit, "mtp": mtp}, spec_mtp.to_markdown(mtp))


if __name__ == "__main__":  # as `kda-ref bench spec` runs it
    from .entry import script

    raise SystemExit(script("spec"))
