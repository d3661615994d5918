"""The five workload families and :func:`make`.

Each family is a generator function (keyword-only parameters; ``None`` means "the scale's default")
returning a :class:`~kda_ref.workloads.Workload`; common arguments: ``seed``, ``num_requests``, ``vocab_size``,
``scale`` (``"tiny"`` | ``"large"``). Lengths take an int or a pair ``(lo, hi)``; new sessions arrive as a
Poisson process at ``rate_per_s``, a session's next request ``think_time_s`` (mean) after the previous one.
Each family reproduces a prefix-sharing shape of Marconi's traces (Pan et al., MLSys 2025) and of
``docs/article.md#s9`` (esp. ``#s9-2``; ``docs/article.md#s7-4``).
Design notes: ``docs/workloads.md#common-arguments``, ``docs/workloads.md#the-families``
"""

from __future__ import annotations

import math
from itertools import accumulate

from ._gen import Drafts, Source, resolve
from .core import Workload, WorkloadError, WorkloadTypeError

_COMMON = ("seed", "num_requests", "vocab_size", "scale")
_MAX_TREE_NODES = 1_000_000

# ---------------------------------------------------------------------------- specs and defaults
# parameter -> kind (see _gen.KINDS); "len" kinds are ranges [lo, hi]
_SPECS: dict[str, dict[str, str]] = {
    "shared_system_prompt": {
        "num_system_prompts": "count", "system_prompt_len": "len", "question_len": "len",
        "output_len": "len", "popularity_skew": "time", "rate_per_s": "rate",
    },
    "multi_turn": {
        "num_conversations": "count", "turns": "len", "system_prompt_len": "len0",
        "first_user_len": "len", "user_len": "len", "output_len": "len", "rate_per_s": "rate",
        "think_time_s": "time",
    },
    "tree_search": {
        "num_trees": "count", "root_len": "len", "branching": "count", "depth": "count0",
        "step_len": "len", "output_len": "len", "order": "order", "rate_per_s": "rate",
        "think_time_s": "time",
    },
    "few_shot": {
        "num_tasks": "count", "pool_size": "count", "instruction_len": "len0",
        "exemplar_len": "len", "shots": "len0", "query_len": "len", "output_len": "len",
        "rate_per_s": "rate",
    },
    "long_document_qa": {
        "num_documents": "count", "document_len": "len", "questions_per_document": "count",
        "question_len": "len", "output_len": "len", "rate_per_s": "rate", "think_time_s": "time",
    },
}

# request count when num_requests is None, for the families without a session-count parameter
_DEFAULT_REQUESTS = {"shared_system_prompt": {"tiny": 24, "large": 500},
                     "few_shot": {"tiny": 24, "large": 500}}

_DEFAULTS: dict[str, dict[str, dict]] = {
    "shared_system_prompt": {
        "tiny": dict(num_system_prompts=2, system_prompt_len=(96, 192), question_len=(16, 64),
                     output_len=(8, 32), popularity_skew=1.0, rate_per_s=4.0),
        "large": dict(num_system_prompts=4, system_prompt_len=(1024, 4096), question_len=(32, 512),
                      output_len=(64, 512), popularity_skew=1.0, rate_per_s=8.0),
    },
    "multi_turn": {
        "tiny": dict(num_conversations=6, turns=(2, 6), system_prompt_len=0,
                     first_user_len=(32, 96), user_len=(16, 48), output_len=(16, 48),
                     rate_per_s=1.0, think_time_s=2.0),
        "large": dict(num_conversations=100, turns=(2, 12), system_prompt_len=0,
                      first_user_len=(64, 1024), user_len=(32, 512), output_len=(64, 768),
                      rate_per_s=1.0, think_time_s=30.0),
    },
    "tree_search": {
        "tiny": dict(num_trees=2, root_len=(128, 256), branching=2, depth=3, step_len=(16, 48),
                     output_len=(8, 24), order="bfs", rate_per_s=0.5, think_time_s=1.0),
        "large": dict(num_trees=16, root_len=(2048, 8192), branching=3, depth=3,
                      step_len=(64, 512), output_len=(64, 512), order="bfs", rate_per_s=0.2,
                      think_time_s=5.0),
    },
    "few_shot": {
        "tiny": dict(num_tasks=3, pool_size=8, instruction_len=(16, 32), exemplar_len=(24, 48),
                     shots=(1, 4), query_len=(8, 32), output_len=(8, 24), rate_per_s=4.0),
        "large": dict(num_tasks=16, pool_size=64, instruction_len=(128, 512),
                      exemplar_len=(128, 512), shots=(2, 8), query_len=(32, 256),
                      output_len=(16, 256), rate_per_s=8.0),
    },
    "long_document_qa": {
        "tiny": dict(num_documents=2, document_len=(384, 512), questions_per_document=6,
                     question_len=(8, 32), output_len=(8, 32), rate_per_s=0.5, think_time_s=2.0),
        "large": dict(num_documents=8, document_len=(8192, 32768), questions_per_document=32,
                      question_len=(16, 128), output_len=(32, 256), rate_per_s=0.05,
                      think_time_s=20.0),
    },
}


def _more(limit: int | None, made: int, drafts: Drafts, num_requests: int | None, start: float) -> bool:
    """Whether to start another session, at ``start``: up to ``limit`` sessions if set; else while there are
    fewer than ``num_requests`` requests, or the session would start before the ``num_requests``-th
    earliest arrival so far -- its first request then belongs to the first ``num_requests`` arrivals the
    workload keeps (:meth:`Drafts.finish`). Stopping at ``num_requests`` requests kept later turns of the
    first sessions in place of sessions that start earlier: too little interleaving, hit rates too high."""
    if limit is not None:
        return made < limit
    if len(drafts) < num_requests:
        return True
    return start < drafts.nth_arrival(num_requests)


# ---------------------------------------------------------------------------- families
def shared_system_prompt(*, seed: int = 0, num_requests: int | None = None, vocab_size: int = 256,
                         scale: str = "tiny", num_system_prompts=None, system_prompt_len=None,
                         question_len=None, output_len=None, popularity_skew=None,
                         rate_per_s=None) -> Workload:
    """Many users behind one or a few shared system prompts, each asking its own question.

    ``prompt = system_prompt[k] + question``, ``k`` with Zipf weights ``1 / (k + 1) ** popularity_skew``; every
    request is its own parentless session ``"sys{k}/user{i}"``, Poisson arrivals at ``rate_per_s``. The article's
    shared-system-prompt case (``docs/article.md#s9-2``, ``docs/article.md#s7-4``).
    Design notes: ``docs/workloads.md#shared_system_prompt--many-users-a-few-system-prompts``
    """
    family = "shared_system_prompt"
    given = dict(num_system_prompts=num_system_prompts, system_prompt_len=system_prompt_len,
                 question_len=question_len, output_len=output_len,
                 popularity_skew=popularity_skew, rate_per_s=rate_per_s)
    p = resolve(family, _SPECS[family], _DEFAULTS[family], given, seed=seed,
                num_requests=num_requests, vocab_size=vocab_size, scale=scale)
    n = num_requests if num_requests is not None else _DEFAULT_REQUESTS[family][scale]
    src = Source(family, seed, vocab_size)
    k_n = p["num_system_prompts"]
    systems = [src.span(p["system_prompt_len"]) for _ in range(k_n)]
    # 1 / (k+1)^skew as exp(-skew ln(k+1)): a large skew underflows to 0 instead of overflowing the power
    cum = list(accumulate(math.exp(-p["popularity_skew"] * math.log(k + 1)) for k in range(k_n)))
    ks = range(k_n)
    d = Drafts()
    t = 0.0
    for i in range(n):
        t += src.gap(p["rate_per_s"])
        k = src.rng.choices(ks, cum_weights=cum)[0]
        d.add(t, systems[k] + src.span(p["question_len"]), src.span(p["output_len"]),
              f"sys{k}/user{i}")
    return d.finish(family, seed, p, None)


def multi_turn(*, seed: int = 0, num_requests: int | None = None, vocab_size: int = 256,
               scale: str = "tiny", num_conversations=None, turns=None, system_prompt_len=None,
               first_user_len=None, user_len=None, output_len=None, rate_per_s=None,
               think_time_s=None) -> Workload:
    """Chat conversations: turn ``t``'s prompt is turn ``t-1``'s prompt + turn ``t-1``'s output +
    the new user text, and its ``parent`` is turn ``t-1``.

    Turn 0 is ``system_prompt + first user text``; sessions ``"conv{c}"`` start at ``rate_per_s``, later turns
    ``think_time_s`` (mean) apart. Marconi's chat workloads; the article's multi-turn case (``docs/article.md#s9``).
    Design notes: ``docs/workloads.md#multi_turn--chat-conversations-lmsys--sharegpt``
    """
    family = "multi_turn"
    given = dict(num_conversations=num_conversations, turns=turns,
                 system_prompt_len=system_prompt_len, first_user_len=first_user_len,
                 user_len=user_len, output_len=output_len, rate_per_s=rate_per_s,
                 think_time_s=think_time_s)
    p = resolve(family, _SPECS[family], _DEFAULTS[family], given, seed=seed,
                num_requests=num_requests, vocab_size=vocab_size, scale=scale,
                session_count="num_conversations")
    if p["turns"][0] < 1:  # pragma: no cover - "len" kind already requires >= 1
        raise WorkloadError("turns: must be >= 1")
    src = Source(family, seed, vocab_size)
    system = src.span(p["system_prompt_len"])
    d = Drafts()
    t, conv = 0.0, 0
    while _more(p["num_conversations"], conv, d, num_requests, t + src.peek_gap(p["rate_per_s"])):
        t += src.gap(p["rate_per_s"])
        n_turns = src.length(p["turns"])
        prompt = system + src.span(p["first_user_len"])
        at, parent = t, None
        for turn in range(n_turns):
            out = src.span(p["output_len"])
            parent = d.add(at, prompt, out, f"conv{conv}", parent)
            if turn + 1 < n_turns:
                at = d.arrival[parent] + src.think(p["think_time_s"])
                prompt = prompt + out + src.span(p["user_len"])
        conv += 1
    return d.finish(family, seed, p, num_requests)


def tree_search(*, seed: int = 0, num_requests: int | None = None, vocab_size: int = 256,
                scale: str = "tiny", num_trees=None, root_len=None, branching=None, depth=None,
                step_len=None, output_len=None, order=None, rate_per_s=None,
                think_time_s=None) -> Workload:
    """Agentic tree search: a root context, then ``branching`` continuations of every node down to
    ``depth`` (a complete tree of ``sum(branching**d for d in 0..depth)`` nodes). A node's prompt
    is its parent's prompt + parent's output + a new step (``step_len``); ``parent`` is that node.

    Session ``"tree{i}"``, nodes issued in ``order`` (``"bfs"`` | ``"dfs"``) ``think_time_s`` apart, trees at
    ``rate_per_s``. Marconi's agentic workload; the article's agent branching (``docs/article.md#s9``).
    Design notes: ``docs/workloads.md#tree_search--agentic-tree-search-swe-bench-style-agents``
    """
    family = "tree_search"
    given = dict(num_trees=num_trees, root_len=root_len, branching=branching, depth=depth,
                 step_len=step_len, output_len=output_len, order=order, rate_per_s=rate_per_s,
                 think_time_s=think_time_s)
    p = resolve(family, _SPECS[family], _DEFAULTS[family], given, seed=seed,
                num_requests=num_requests, vocab_size=vocab_size, scale=scale,
                session_count="num_trees")
    b = p["branching"]
    visit = _tree_visit_order(b, _tree_size(b, p["depth"]), p["order"])
    src = Source(family, seed, vocab_size)
    d = Drafts()
    t, tree = 0.0, 0
    while _more(p["num_trees"], tree, d, num_requests, t + src.peek_gap(p["rate_per_s"])):
        t += src.gap(p["rate_per_s"])
        at = t
        req_of: dict[int, int] = {}
        for j in visit:
            if j == 0:
                prompt, parent = src.span(p["root_len"]), None
            else:
                parent = req_of[(j - 1) // b]
                prompt = d.prompt[parent] + d.output[parent] + src.span(p["step_len"])
            req_of[j] = idx = d.add(at, prompt, src.span(p["output_len"]), f"tree{tree}", parent)
            at = d.arrival[idx] + src.think(p["think_time_s"])
        tree += 1
    return d.finish(family, seed, p, num_requests)


def _tree_size(b: int, depth_: int) -> int:
    """Node count of a complete tree of branching ``b`` and depth ``depth_``; past the limit a WorkloadError."""
    n_nodes, level = 0, 1
    for _ in range(depth_ + 1):  # level by level, stopping as soon as the limit is passed
        n_nodes += level
        if n_nodes > _MAX_TREE_NODES:
            raise WorkloadError(f"branching, depth: a tree of branching={b}, depth={depth_} has more than "
                                f"{_MAX_TREE_NODES} nodes")
        level *= b
    return n_nodes


def _tree_visit_order(b: int, n_nodes: int, order: str) -> list[int]:
    """The nodes of one tree in issue order: ``"bfs"`` level by level, else depth-first preorder."""
    # node j (breadth-first numbering) has children j*b+1 .. j*b+b and parent (j-1)//b
    if order == "bfs":
        return list(range(n_nodes))
    visit, stack = [], [0]
    while stack:
        j = stack.pop()
        visit.append(j)
        stack.extend(c for c in range(j * b + b, j * b, -1) if c < n_nodes)
    return visit


def few_shot(*, seed: int = 0, num_requests: int | None = None, vocab_size: int = 256,
             scale: str = "tiny", num_tasks=None, pool_size=None, instruction_len=None,
             exemplar_len=None, shots=None, query_len=None, output_len=None,
             rate_per_s=None) -> Workload:
    """Few-shot prompting from a shared pool of ``pool_size`` exemplars.

    ``prompt = instruction[t] + ex[t][0] + ... + ex[t][k-1] + query`` for a task ``t`` (session ``"task{t}"``, a
    fixed ordered choice of ``max(shots)`` exemplars) and ``k`` drawn from ``shots``; parentless, Poisson arrivals
    at ``rate_per_s``. ``docs/article.md#s9-2``'s nested-prefix case.
    Design notes: ``docs/workloads.md#few_shot--a-shared-pool-of-exemplars``
    """
    family = "few_shot"
    given = dict(num_tasks=num_tasks, pool_size=pool_size, instruction_len=instruction_len,
                 exemplar_len=exemplar_len, shots=shots, query_len=query_len,
                 output_len=output_len, rate_per_s=rate_per_s)
    p = resolve(family, _SPECS[family], _DEFAULTS[family], given, seed=seed,
                num_requests=num_requests, vocab_size=vocab_size, scale=scale)
    lo, hi = p["shots"]
    if hi > p["pool_size"]:
        raise WorkloadError(f"shots, pool_size: up to {hi} shots need a pool of at least {hi} "
                            f"exemplars, pool_size is {p['pool_size']}")
    n = num_requests if num_requests is not None else _DEFAULT_REQUESTS[family][scale]
    src = Source(family, seed, vocab_size)
    pool = [src.span(p["exemplar_len"]) for _ in range(p["pool_size"])]
    prefixes = []  # prefixes[task][k] = instruction + first k exemplars of the task
    for _ in range(p["num_tasks"]):
        chosen = src.rng.sample(range(p["pool_size"]), hi)
        pre = [src.span(p["instruction_len"])]
        for e in chosen:
            pre.append(pre[-1] + pool[e])
        prefixes.append(pre)
    d = Drafts()
    t = 0.0
    for _ in range(n):
        t += src.gap(p["rate_per_s"])
        task = src.rng.randrange(p["num_tasks"])
        k = src.length(p["shots"])
        d.add(t, prefixes[task][k] + src.span(p["query_len"]), src.span(p["output_len"]),
              f"task{task}")
    return d.finish(family, seed, p, None)


def long_document_qa(*, seed: int = 0, num_requests: int | None = None, vocab_size: int = 256,
                     scale: str = "tiny", num_documents=None, document_len=None,
                     questions_per_document=None, question_len=None, output_len=None,
                     rate_per_s=None, think_time_s=None) -> Workload:
    """A few long documents, several questions about each: ``prompt = document + question``.

    Session ``"doc{d}"``: the first question at ``rate_per_s`` (Poisson), each further one ``think_time_s`` (mean)
    later; ``parent`` is None. The long-context case (``docs/article.md#s5-2``, ``#s9-2``). Memory grows with
    ``num_requests × document_len`` (prompts are tuples).
    Design notes: ``docs/workloads.md#long_document_qa--a-few-long-documents-several-questions-each``
    """
    family = "long_document_qa"
    given = dict(num_documents=num_documents, document_len=document_len,
                 questions_per_document=questions_per_document, question_len=question_len,
                 output_len=output_len, rate_per_s=rate_per_s, think_time_s=think_time_s)
    p = resolve(family, _SPECS[family], _DEFAULTS[family], given, seed=seed,
                num_requests=num_requests, vocab_size=vocab_size, scale=scale,
                session_count="num_documents")
    src = Source(family, seed, vocab_size)
    d = Drafts()
    t, doc = 0.0, 0
    while _more(p["num_documents"], doc, d, num_requests, t + src.peek_gap(p["rate_per_s"])):
        t += src.gap(p["rate_per_s"])
        document = src.span(p["document_len"])
        at = t
        for q in range(p["questions_per_document"]):
            idx = d.add(at, document + src.span(p["question_len"]), src.span(p["output_len"]),
                        f"doc{doc}")
            at = d.arrival[idx] + src.think(p["think_time_s"])
        doc += 1
    return d.finish(family, seed, p, num_requests)


FAMILIES = {
    "shared_system_prompt": shared_system_prompt,
    "multi_turn": multi_turn,
    "tree_search": tree_search,
    "few_shot": few_shot,
    "long_document_qa": long_document_qa,
}


def _check_family(family) -> None:
    if not isinstance(family, str) or family not in FAMILIES:
        raise WorkloadError(f"family: unknown workload family {family!r}; choose one of "
                            f"{list(FAMILIES)}")


def parameters(family: str) -> tuple[str, ...]:
    """The names ``make(family, ...)`` accepts as overrides (besides the common arguments)."""
    _check_family(family)
    return tuple(_SPECS[family])


def defaults(family: str, scale: str = "tiny") -> dict:
    """The default parameters of ``family`` at ``scale`` (ranges as ``[lo, hi]``), plus the
    default request count for the families whose count is ``num_requests`` itself."""
    _check_family(family)
    if scale not in _DEFAULTS[family]:
        raise WorkloadError(f"scale: must be one of ['tiny', 'large'], got {scale!r}")
    out = {k: list(v) if isinstance(v, tuple) else v for k, v in _DEFAULTS[family][scale].items()}
    if family in _DEFAULT_REQUESTS:
        out["num_requests"] = _DEFAULT_REQUESTS[family][scale]
    return out


def make(family: str, seed: int = 0, num_requests: int | None = None, vocab_size: int = 256,
         scale: str = "tiny", **overrides) -> Workload:
    """Generate a workload of ``family`` (a key of :data:`FAMILIES`).

    ``overrides`` are the family's own parameters (see :func:`parameters` and each generator's
    docstring); an unknown name raises :class:`WorkloadTypeError` (a ``TypeError`` and a
    :class:`WorkloadError`), a bad value :class:`WorkloadError` naming the argument.
    ``make(w.family, w.seed, **w.params)`` reproduces ``w``.
    """
    _check_family(family)
    unknown = sorted(set(overrides) - set(_SPECS[family]))
    if unknown:
        raise WorkloadTypeError(f"make(): unknown parameter(s) {unknown} for family {family!r}; "
                                f"its parameters are {list(_SPECS[family])} (and {list(_COMMON)})")
    return FAMILIES[family](seed=seed, num_requests=num_requests, vocab_size=vocab_size,
                            scale=scale, **overrides)


__all__ = ["FAMILIES", "defaults", "make", "parameters"]
