"""kda_ref.workloads: determinism, structure of each family, JSONL round trip and validation,
parameter errors, and the shared-prefix statistic against a brute-force count."""

from __future__ import annotations

import json
import math
import random
import time

import pytest

from kda_ref.workloads import (FAMILIES, Workload, WorkloadError, WorkloadRequest,
                               WorkloadTypeError, defaults, load, make, parameters, save,
                               shared_prefix_tokens)

NAMES = ["shared_system_prompt", "multi_turn", "tree_search", "few_shot", "long_document_qa"]


def _lcp(x, y) -> int:
    n = 0
    for a, b in zip(x, y):
        if a != b:
            break
        n += 1
    return n


def brute_shared(reqs) -> int:
    total = 0
    for i, r in enumerate(reqs):
        best = 0
        for q in reqs[:i]:
            best = max(best, _lcp(r.prompt, q.prompt + q.output))
        total += best
    return total


def check_invariants(w: Workload, vocab: int) -> None:
    prev = -math.inf
    by_id = w.requests
    for i, r in enumerate(w.requests):
        assert r.req_id == i
        assert r.arrival_s >= prev
        prev = r.arrival_s
        assert isinstance(r.prompt, tuple) and isinstance(r.output, tuple)
        assert len(r.prompt) >= 1 and len(r.output) >= 1
        assert 0 <= min(r.prompt) and max(r.prompt) < vocab
        assert 0 <= min(r.output) and max(r.output) < vocab
        if r.parent is not None:
            par = by_id[r.parent]
            assert r.parent < i
            assert r.arrival_s > par.arrival_s  # children strictly after parents
            assert r.session == par.session
            base = par.prompt + par.output
            assert r.prompt[:len(base)] == base and len(r.prompt) > len(base)
    w.validate()


# ---------------------------------------------------------------------------- API shape
def test_family_names_and_signatures():
    assert list(FAMILIES) == NAMES
    for name in NAMES:
        assert parameters(name)
        assert "rate_per_s" in parameters(name) and "output_len" in parameters(name)
        assert set(defaults(name, "tiny")) >= set(parameters(name))
    assert issubclass(WorkloadError, ValueError)
    assert issubclass(WorkloadTypeError, WorkloadError) and issubclass(WorkloadTypeError, TypeError)


@pytest.mark.parametrize("family", NAMES)
def test_deterministic_and_seed_dependent(family):
    a = make(family, seed=7)
    b = make(family, seed=7)
    assert a == b
    assert FAMILIES[family](seed=7) == a  # the generator itself, same defaults
    c = make(family, seed=8)
    assert [r.prompt for r in c.requests] != [r.prompt for r in a.requests]
    # the recorded params regenerate the workload exactly
    assert make(a.family, a.seed, **a.params) == a


@pytest.mark.parametrize("family", NAMES)
@pytest.mark.parametrize("vocab", [256, 7])
def test_invariants_tiny(family, vocab):
    w = make(family, seed=1, vocab_size=vocab)
    check_invariants(w, vocab)
    s = w.stats()
    assert 1 <= s["num_requests"] <= 40
    assert 40 <= s["mean_prompt_len"] and s["max_prompt_len"] <= 600
    assert 0 < s["shared_prefix_tokens"] < s["prompt_tokens"]
    assert w.params["vocab_size"] == vocab and w.params["scale"] == "tiny"


@pytest.mark.parametrize("family", NAMES)
def test_num_requests_exact_and_cap(family):
    w = make(family, seed=2, num_requests=57)
    assert len(w) == 57
    check_invariants(w, 256)
    small = make(family, seed=2, num_requests=3)
    assert len(small) == 3
    check_invariants(small, 256)


def test_explicit_session_count_only_caps():
    full = make("multi_turn", seed=0, num_conversations=2, turns=3)
    assert len(full) == 6
    assert len(make("multi_turn", seed=0, num_conversations=2, turns=3, num_requests=4)) == 4
    assert len(make("multi_turn", seed=0, num_conversations=2, turns=3, num_requests=100)) == 6


# ---------------------------------------------------------------------------- family structure
def test_multi_turn_chains():
    w = make("multi_turn", seed=3, turns=(3, 5))
    sessions: dict[str, list[WorkloadRequest]] = {}
    for r in w.requests:
        sessions.setdefault(r.session, []).append(r)
    assert len(sessions) == 6
    for turns in sessions.values():
        assert 3 <= len(turns) <= 5
        assert turns[0].parent is None
        for prev, cur in zip(turns, turns[1:]):
            assert cur.parent == prev.req_id
            assert cur.prompt[:len(prev.prompt) + len(prev.output)] == prev.prompt + prev.output
            assert cur.arrival_s > prev.arrival_s
    # conversations interleave in arrival order
    order = [r.session for r in w.requests]
    assert any(order[i] != order[i + 1] and order[i] in order[i + 2:] for i in range(len(order) - 2))


def test_multi_turn_shared_system_prompt():
    w = make("multi_turn", seed=0, system_prompt_len=40)
    firsts = [r for r in w.requests if r.parent is None]
    assert len({r.prompt[:40] for r in firsts}) == 1


@pytest.mark.parametrize("order", ["bfs", "dfs"])
def test_tree_search_structure(order):
    b, depth = 3, 2
    w = make("tree_search", seed=4, num_trees=2, branching=b, depth=depth, order=order)
    per_tree = 1 + b + b * b
    assert len(w) == 2 * per_tree
    check_invariants(w, 256)
    children: dict[int, list[WorkloadRequest]] = {}
    for r in w.requests:
        if r.parent is not None:
            children.setdefault(r.parent, []).append(r)
    for pid, kids in children.items():
        par = w.requests[pid]
        base = par.prompt + par.output
        assert len(kids) == b
        assert all(k.prompt[:len(base)] == base for k in kids)  # siblings share the parent
        assert len({k.prompt[len(base):] for k in kids}) == b  # and then diverge
    roots = [r for r in w.requests if r.parent is None]
    assert len(roots) == 2
    for root in roots:
        nodes = [r for r in w.requests if r.session == root.session]
        depth_of = {}
        for r in nodes:
            depth_of[r.req_id] = 0 if r.parent is None else depth_of[r.parent] + 1
        depths = [depth_of[r.req_id] for r in nodes]
        assert max(depths) == depth
        if order == "bfs":
            assert depths == sorted(depths)
        else:  # preorder: every node's parent is on the current root-to-node path
            path: list[int] = []
            for r in nodes:
                while path and path[-1] != r.parent:
                    path.pop()
                assert (r.parent is None) == (not path)
                path.append(r.req_id)
            assert depths[:depth + 1] == list(range(depth + 1))


def test_few_shot_prefixes_within_task():
    w = make("few_shot", seed=5, instruction_len=10, exemplar_len=6, shots=(2, 2), query_len=3,
             pool_size=4, num_tasks=2, num_requests=20)
    by_task: dict[str, set] = {}
    for r in w.requests:
        assert len(r.prompt) == 10 + 2 * 6 + 3
        by_task.setdefault(r.session, set()).add(r.prompt[:22])
    assert all(len(p) == 1 for p in by_task.values())  # instruction + 2 exemplars shared in a task
    # nested shots: a 1-shot prompt's prefix is the same task's 3-shot prefix
    w = make("few_shot", seed=5, instruction_len=10, exemplar_len=6, shots=(1, 3), query_len=3,
             pool_size=3, num_tasks=1, num_requests=30)
    long = next(r for r in w.requests if len(r.prompt) == 10 + 18 + 3)
    short = next(r for r in w.requests if len(r.prompt) == 10 + 6 + 3)
    assert short.prompt[:16] == long.prompt[:16]


def test_shared_system_prompt_and_long_document_prefixes():
    w = make("shared_system_prompt", seed=6, num_system_prompts=1, system_prompt_len=100)
    assert len({r.prompt[:100] for r in w.requests}) == 1
    assert len({r.session for r in w.requests}) == len(w)
    w = make("long_document_qa", seed=6, document_len=300, num_documents=3)
    docs: dict[str, set] = {}
    for r in w.requests:
        assert r.parent is None
        docs.setdefault(r.session, set()).add(r.prompt[:300])
    assert len(docs) == 3 and all(len(v) == 1 for v in docs.values())


def test_large_scale_lengths():
    w = make("shared_system_prompt", scale="large", num_requests=50)
    assert w.stats()["max_prompt_len"] > 1024
    w = make("long_document_qa", scale="large", num_requests=4)
    assert min(len(r.prompt) for r in w.requests) >= 8192


# ---------------------------------------------------------------------------- parameter errors
@pytest.mark.parametrize("kwargs, exc, needle", [
    (dict(family="nope"), WorkloadError, "family"),
    (dict(family="multi_turn", turn=3), TypeError, "turn"),
    (dict(family="multi_turn", user_len=-1), WorkloadError, "user_len"),
    (dict(family="multi_turn", user_len=(10, 5)), WorkloadError, "user_len"),
    (dict(family="multi_turn", user_len="long"), TypeError, "user_len"),
    (dict(family="tree_search", depth=-1), WorkloadError, "depth"),
    (dict(family="tree_search", order="random"), WorkloadError, "order"),
    (dict(family="tree_search", branching=50, depth=6), WorkloadError, "branching"),
    (dict(family="few_shot", shots=(1, 9), pool_size=4), WorkloadError, "pool_size"),
    (dict(family="few_shot", rate_per_s=0), WorkloadError, "rate_per_s"),
    (dict(family="long_document_qa", think_time_s=-1.0), WorkloadError, "think_time_s"),
    (dict(family="shared_system_prompt", num_requests=0), WorkloadError, "num_requests"),
    (dict(family="shared_system_prompt", vocab_size=0), WorkloadError, "vocab_size"),
    (dict(family="shared_system_prompt", scale="huge"), WorkloadError, "scale"),
    (dict(family="shared_system_prompt", seed=1.5), TypeError, "seed"),
    (dict(family="shared_system_prompt", output_len=0), WorkloadError, "output_len"),
    (dict(family="shared_system_prompt", num_system_prompts=True), TypeError, "num_system_prompts"),
])
def test_parameter_errors(kwargs, exc, needle):
    with pytest.raises(exc, match=needle) as info:
        make(**kwargs)
    assert isinstance(info.value, WorkloadError)


# ---------------------------------------------------------------------------- JSONL
@pytest.mark.parametrize("family", NAMES)
def test_jsonl_round_trip(family, tmp_path):
    w = make(family, seed=11, vocab_size=300)
    path = tmp_path / f"{family}.jsonl"
    save(w, path)
    header = json.loads(path.read_text().splitlines()[0])
    assert header["schema"] == "kda_ref.workloads" and header["version"] == 2 and header["num_requests"] == len(w)
    assert header["family"] == family and header["seed"] == 11
    assert len(path.read_text().splitlines()) == len(w) + 1
    back = load(path)
    assert back == w
    assert back.stats() == w.stats()
    gz = tmp_path / f"{family}.jsonl.gz"
    w.to_jsonl(gz)
    assert Workload.from_jsonl(gz) == w


def _lines(tmp_path):
    w = make("multi_turn", seed=0, vocab_size=64, num_conversations=2, turns=3)
    path = tmp_path / "w.jsonl"
    save(w, path)
    return [json.loads(x) for x in path.read_text().splitlines()], w


def _first_child(objs):
    return next(i for i, o in enumerate(objs) if i and o["parent"] is not None)


MALFORMED = {
    "empty file": (lambda objs: [], "line 1"),
    "header not json": (lambda objs: ["{not json"] + objs[1:], "line 1"),
    "bad schema": (lambda objs: [dict(objs[0], schema="other")] + objs[1:], "schema"),
    "bad version": (lambda objs: [dict(objs[0], version=3)] + objs[1:], "version"),
    "missing version": (lambda objs: [{k: v for k, v in objs[0].items() if k != "version"}]
                        + objs[1:], "version"),
    "no vocab_size": (lambda objs: [dict(objs[0], params={})] + objs[1:], "vocab_size"),
    "request not json": (lambda objs: objs[:2] + ['{"req_id": 1,'] + objs[3:], "line 3"),
    "request not object": (lambda objs: objs[:2] + [[1, 2]] + objs[3:], "line 3"),
    "blank line": (lambda objs: objs[:2] + [""] + objs[2:], "line 3"),
    "missing field": (lambda objs: objs[:2] + [{k: v for k, v in objs[2].items()
                                                if k != "session"}] + objs[3:], "session"),
    "unknown field": (lambda objs: objs[:2] + [dict(objs[2], extra=1)] + objs[3:], "extra"),
    "req_id out of order": (lambda objs: objs[:2] + [dict(objs[2], req_id=5)] + objs[3:],
                            "req_id"),
    "arrival goes back": (lambda objs: objs[:3] + [dict(objs[3], arrival_s=0.0)] + objs[4:],
                          "arrival_s"),
    "arrival negative": (lambda objs: objs[:1] + [dict(objs[1], arrival_s=-1.0)] + objs[2:],
                         "arrival_s"),
    "arrival not a number": (lambda objs: objs[:1] + [dict(objs[1], arrival_s="soon")] + objs[2:],
                             "arrival_s"),
    "token out of range": (lambda objs: objs[:2] + [dict(objs[2], prompt=[1, 64, 2])] + objs[3:],
                           "prompt.*64"),
    "negative token": (lambda objs: objs[:2] + [dict(objs[2], output=[-1])] + objs[3:], "output"),
    "float token": (lambda objs: objs[:2] + [dict(objs[2], prompt=[1.5])] + objs[3:], "prompt"),
    "bool token": (lambda objs: objs[:2] + [dict(objs[2], output=[True])] + objs[3:], "output"),
    "empty prompt": (lambda objs: objs[:2] + [dict(objs[2], prompt=[])] + objs[3:], "prompt"),
    "prompt not a list": (lambda objs: objs[:2] + [dict(objs[2], prompt="abc")] + objs[3:],
                          "prompt"),
    "session not str": (lambda objs: objs[:2] + [dict(objs[2], session=3)] + objs[3:], "session"),
    "parent in the future": (lambda objs: objs[:2] + [dict(objs[2], parent=4)] + objs[3:],
                             "parent"),
    "parent prefix mismatch": (
        lambda objs: [dict(o, prompt=[(o["prompt"][0] + 1) % 64] + o["prompt"][1:])
                      if i == _first_child(objs) else o for i, o in enumerate(objs)],
        "parent"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_files_raise(case, tmp_path):
    objs, _ = _lines(tmp_path)
    mutate, needle = MALFORMED[case]
    out = mutate(objs)
    path = tmp_path / "bad.jsonl"
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in out)
                    if out else "")
    with pytest.raises(WorkloadError, match=needle) as info:
        load(path)
    assert "line" in str(info.value)


def test_unmodified_lines_load(tmp_path):
    objs, w = _lines(tmp_path)
    path = tmp_path / "ok.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    assert load(path) == w


def test_request_coerces_lists():
    r = WorkloadRequest(0, 0.0, [1, 2], [3], "s", None)
    assert r.prompt == (1, 2) and r.output == (3,) and r.max_tokens == 1


# ---------------------------------------------------------------------------- shared prefix stat
@pytest.mark.parametrize("family", NAMES)
def test_shared_prefix_matches_brute_force(family):
    for vocab in (256, 3):  # a 3-token vocabulary makes accidental partial matches everywhere
        w = make(family, seed=9, vocab_size=vocab, num_requests=25)
        assert w.stats()["shared_prefix_tokens"] == brute_shared(w.requests)


def test_shared_prefix_random_sequences():
    rng = random.Random(0)
    for _ in range(300):
        reqs = []
        for i in range(rng.randint(1, 8)):
            reqs.append(WorkloadRequest(i, float(i), tuple(rng.choices(range(2), k=rng.randint(1, 12))),
                                        tuple(rng.choices(range(2), k=rng.randint(1, 6))), "s"))
        assert shared_prefix_tokens(reqs) == brute_shared(reqs)


def test_shared_prefix_random_long_sequences():
    """Long shared runs with late divergences: exercises edge splits, galloping and the
    prompt/output boundary inside an edge."""
    rng = random.Random(1)
    for _ in range(40):
        base = tuple(rng.choices(range(2), k=200))
        reqs = []
        for i in range(rng.randint(2, 10)):
            cut = rng.randint(0, 200)
            seq = base[:cut] + tuple(rng.choices(range(2), k=rng.randint(1, 60)))
            split = rng.randint(1, len(seq))
            out = seq[split:] or (rng.randrange(2),)
            reqs.append(WorkloadRequest(i, float(i), seq[:split], out, "s"))
        assert shared_prefix_tokens(reqs) == brute_shared(reqs)


def test_shared_prefix_handmade():
    R = lambda i, p, o: WorkloadRequest(i, float(i), tuple(p), tuple(o), "s")  # noqa: E731
    reqs = [R(0, [1, 2, 3], [4, 5]),
            R(1, [1, 2, 3, 4, 5, 6], [7]),  # extends 0's prompt+output: 5 shared
            R(2, [1, 2], [9]),  # ends inside an edge: 2 shared
            R(3, [1, 2, 9, 9], [0]),  # matches 2's prompt+output (1,2,9): 3 shared
            R(4, [8], [1]),  # nothing shared
            R(5, [1, 2, 3, 4, 5, 6, 7], [1])]  # all 7 shared (1's prompt + output)
    assert shared_prefix_tokens(reqs) == 0 + 5 + 2 + 3 + 0 + 7 == brute_shared(reqs)


# ---------------------------------------------------------------------------- scale
def test_ten_thousand_large_requests():
    t0 = time.perf_counter()
    w = make("multi_turn", seed=0, scale="large", num_requests=10_000)
    t1 = time.perf_counter()
    s = w.stats()
    t2 = time.perf_counter()
    print(f"\n10k large multi_turn: generate {t1 - t0:.2f}s, stats {t2 - t1:.2f}s, "
          f"{s['prompt_tokens'] / 1e6:.1f}M prompt tokens, shared {s['shared_prefix_fraction']:.3f}")
    assert s["num_requests"] == 10_000
    assert s["dependent_requests"] > 5_000 and s["sessions"] > 1_000
    assert 1_000 < s["mean_prompt_len"] < 10_000
    prev = -1.0
    for i, r in enumerate(w.requests):
        assert r.req_id == i and r.arrival_s >= prev
        prev = r.arrival_s
        if r.parent is not None:
            par = w.requests[r.parent]
            assert par.arrival_s < r.arrival_s
            assert r.prompt[:len(par.prompt)] == par.prompt
    assert s["shared_prefix_tokens"] >= sum(len(w.requests[r.parent].prompt) +
                                            len(w.requests[r.parent].output)
                                            for r in w.requests if r.parent is not None)


def test_the_benchmark_arguments_list_every_family():
    """The torch-free argument parser of ``kda-ref bench workloads`` names the families itself."""
    from kda_ref.bench.args import WORKLOAD_FAMILIES

    assert tuple(FAMILIES) == WORKLOAD_FAMILIES


@pytest.mark.parametrize("family", ["multi_turn", "tree_search", "long_document_qa"])
def test_num_requests_keeps_the_first_arrivals_of_the_sessions(family):
    """A family of sessions stopped starting sessions once it had ``num_requests`` requests, so the later
    turns of its first sessions stood in for sessions that start earlier (5 requests of one conversation
    over 168 s where five conversations start within 7 s): the first N arrivals are what it keeps."""
    few, many = (make(family, seed=0, scale="large", num_requests=n) for n in (5, 60))
    key = lambda w: [(r.arrival_s, r.session, r.prompt, r.output) for r in w.requests]  # noqa: E731
    assert key(few) == key(many)[:5]


def test_extreme_family_parameters_are_served_or_named_at_once():
    """A steep popularity skew overflowed the weights' power (an OverflowError), and a deep tree's size was
    summed over every level before the limit was checked (seconds, then a ValueError formatting a number of
    thousands of digits)."""
    w = make("shared_system_prompt", seed=0, popularity_skew=700.0, num_system_prompts=3)
    assert {r.session.split("/")[0] for r in w.requests} == {"sys0"}  # all the weight on the first prompt
    for branching, depth in ((2, 40_000), (1, 3_000_000)):
        t0 = time.perf_counter()
        with pytest.raises(WorkloadError, match="^branching, depth: .* has more than"):
            make("tree_search", branching=branching, depth=depth)
        assert time.perf_counter() - t0 < 0.5
