"""The scenario of the "Checkpoint density and policies" page (``docs/article.md#s9-2``).

Three views of how often to keep a KDA state: the cost model (:func:`cost_facts`, :func:`break_even_rows`,
:func:`cost_figure`; :class:`~kda_ref.cache.cost.CostModel`), the simulator run live (:func:`simulate`,
:func:`sweep_figure`; :class:`~kda_ref.sim.CacheSimulator`) and the benchmark CSVs (:func:`load_bench`,
:func:`bench_figure`). A missing or malformed CSV raises :class:`BenchError` with a message key.

Design notes: ``docs/visualizer.md#checkpoint-density``.
"""

from __future__ import annotations
import csv
import functools
import math
import pathlib
from kda_ref.cache.cost import CostModel
from kda_ref.sim import CacheSimulator
from kda_ref.sim.simulator import SimulationError
from kda_ref.workloads import FAMILIES, make
from ..families import family as model_family
from ..i18n import t


ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKLOADS_CSV = ROOT / "docs" / "bench" / "workloads.csv"
PREFIX_CSV = ROOT / "docs" / "bench" / "prefix_cache.csv"
BENCH_COMMAND = "kda-ref bench workloads"
FAMILY_NAMES = tuple(FAMILIES)
NUM_REQUESTS = 100

# long_document_qa's prompts are ~22k tokens (7x the others): fewer requests keep a run around a second
REQUESTS = {"long_document_qa": 40}
SEED = 0
BLOCK_SIZE, HASH_UNIT = 512, 16

# retention choices: None = dense (a state per block), N = one per N tokens (+ reachable), 0 = reachable only
INTERVALS = (None, 1024, 2048, 4096, 8192, 0)
BUDGETS_GIB = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # K3's checkpoint is ~430 MiB: it needs the upper end
EVICTIONS = ("lru", "marconi")
BREAK_EVEN_N = (64, 256, 512, 1024, 2048, 4096, 8192, 16384)
TYPICAL_PREFIX = 8192  # where the cost table prices a recompute (position matters for MLA only)


class BenchError(Exception):
    """A benchmark CSV that is missing or malformed; ``key`` is the i18n message, ``fmt`` its values."""

    def __init__(self, key: str, **fmt):
        super().__init__(key, fmt)
        self.key, self.fmt = key, fmt

    def message(self) -> str:
        return t(self.key, **self.fmt)


# ---- cost model -----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=2)
def cost_model(model: str = "kimi_linear") -> CostModel:
    """The cost model at the released sizes of ``model`` (``"kimi_linear"``: Kimi-Linear-48B, ``"k3"``:
    Kimi K3; :mod:`model_viz.families`)."""
    return CostModel(model_family(model).real())


def cost_facts(cost: CostModel | None = None) -> dict:
    """The byte and FLOP constants the page quotes (of the released model ``cost`` describes; 48B by default)."""
    c = cost or cost_model()
    return {"state_bytes": c.state_bytes, "state_mib": c.state_bytes / 2**20,
            "kv_bytes_per_token": c.kv_bytes_per_token, "break_even_tokens": c.state_bytes / c.kv_bytes_per_token,
            "gflops_per_token": c.linear_flops_per_token / 1e9, "n_kda": len(c.config.kda_layer_ids),
            "n_mla": len(c.config.mla_layer_ids)}


def ratio(N: int, cost: CostModel | None = None) -> float:
    """A checkpoint every ``N`` tokens, in units of the KV of the same ``N`` tokens."""
    c = cost or cost_model()
    return c.state_bytes / (N * c.kv_bytes_per_token)


def recompute(N: int, cost: CostModel | None = None, at: int = TYPICAL_PREFIX) -> tuple[float, float, float]:
    """A hit at a uniformly random position between two checkpoints ``N`` apart: mean tokens recomputed
    ``(N - 1) / 2``, their prefill TFLOPs and estimated milliseconds (ending at prefix length ``at``)."""
    c = cost or cost_model()
    n = (N - 1) / 2
    k = int(round(n))
    return n, c.prefill_flops(at - k, at) / 1e12, 1e3 * c.prefill_seconds(at - k, at)


def break_even_rows(Ns=BREAK_EVEN_N, cost: CostModel | None = None) -> list[dict]:
    """One row per checkpoint interval: memory of the states vs the KV, and the recompute on a hit."""
    c = cost or cost_model()
    rows = []
    for N in Ns:
        n, tf, ms = recompute(N, c)
        rows.append({"N": N, "ratio": ratio(N, c), "state_mib_per_1k": c.state_bytes / N * 1000 / 2**20,
                     "kv_mib_per_1k": c.kv_bytes_per_token * 1000 / 2**20, "recompute_tokens": n,
                     "recompute_tflops": tf, "recompute_ms": ms})
    return rows


# ---- simulator ----------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=len(FAMILIES))
def workload(family: str):
    return make(family, seed=SEED, scale="large", num_requests=REQUESTS.get(family, NUM_REQUESTS))


def options(interval: int | None, eviction: str) -> dict:
    if interval not in INTERVALS:
        raise ValueError(f"interval: must be one of {INTERVALS}, got {interval!r}")
    if eviction not in EVICTIONS:
        raise ValueError(f"eviction: must be one of {EVICTIONS}, got {eviction!r}")
    return {"block_size": BLOCK_SIZE, "hash_unit": HASH_UNIT, "mamba_cache_mode": "all", "retention_interval": interval,
            "partial_hits": True, "eviction": eviction}


def simulate(family: str, interval: int | None, budget_gib: float, eviction: str, model: str = "kimi_linear") -> dict:
    """One simulator run: the summary of :class:`~kda_ref.sim.SimResult` (hit rate, FLOPs saved,
    checkpoint GiB, TTFT, evictions, wall time). A budget too small for one request of the workload
    gives ``{"error": message}`` instead (the simulator's :class:`SimulationError`)."""
    if family not in FAMILIES:
        raise ValueError(f"family: must be one of {FAMILY_NAMES}, got {family!r}")
    try:
        cost = cost_model(model)
        sim = CacheSimulator(cost.config, "block", int(budget_gib * 2**30), options(interval, eviction), cost=cost)
        return sim.run(workload(family).requests).summary()
    except SimulationError as err:
        return {"error": str(err)}


# ---- benchmark CSVs -------------------------------------------------------------------------------------
BENCH_REQUIRED = ("family", "budget_gib", "policy", "token_hit_rate", "flops_saved_frac")
BENCH_NUMERIC = ("budget_gib", "token_hit_rate", "flops_saved_frac", "prefill_tflops", "flops_saved_tflops",
                 "peak_checkpoint_gib", "mean_checkpoint_gib", "ttft_mean_ms", "ttft_p95_ms", "hits", "evictions",
                 "requests", "wall_s")
PREFIX_REQUIRED = ("workload", "policy", "budget_mb", "prompt_tokens", "cached_prompt_tokens", "48b_checkpoint_gib")


def _read_csv(path, required: tuple, numeric: tuple) -> list[dict]:
    path = pathlib.Path(path)
    if not path.is_file():
        raise BenchError("checkpoint_density.bench.missing", path=_rel(path), cmd=BENCH_COMMAND)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise BenchError("checkpoint_density.bench.bad", path=_rel(path), msg=f"missing columns {', '.join(missing)}")
            rows = []
            for n, raw in enumerate(reader, start=2):
                row = dict(raw)
                for col in numeric:
                    if col not in row or row[col] in (None, ""):
                        if col in required:
                            raise BenchError("checkpoint_density.bench.bad", path=_rel(path), msg=f"line {n}: {col} is empty")
                        row[col] = None
                        continue
                    try:
                        row[col] = float(row[col])
                    except ValueError:
                        raise BenchError("checkpoint_density.bench.bad", path=_rel(path),
                                         msg=f"line {n}: {col} = {row[col]!r} is not a number") from None
                    if not math.isfinite(row[col]):
                        raise BenchError("checkpoint_density.bench.bad", path=_rel(path), msg=f"line {n}: {col} is not finite")
                if any(not row.get(c) for c in required if c not in numeric):
                    raise BenchError("checkpoint_density.bench.bad", path=_rel(path), msg=f"line {n}: an empty text field")
                rows.append(row)
    except UnicodeDecodeError as err:
        raise BenchError("checkpoint_density.bench.bad", path=_rel(path), msg=f"not UTF-8 text ({err.reason})") from None
    except csv.Error as err:
        raise BenchError("checkpoint_density.bench.bad", path=_rel(path), msg=str(err)) from None
    if not rows:
        raise BenchError("checkpoint_density.bench.bad", path=_rel(path), msg="no data rows")
    return rows


def _rel(path: pathlib.Path) -> str:
    try:
        return str(pathlib.Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def load_bench(path=None) -> list[dict]:
    """Rows of ``docs/bench/workloads.csv`` (numbers parsed); :class:`BenchError` if missing or bad."""
    rows = _read_csv(WORKLOADS_CSV if path is None else path, BENCH_REQUIRED, BENCH_NUMERIC)
    for r in rows:
        for col in ("token_hit_rate", "flops_saved_frac"):
            if not -1e-9 <= r[col] <= 1 + 1e-9:
                raise BenchError("checkpoint_density.bench.bad", path=_rel(pathlib.Path(path or WORKLOADS_CSV)),
                                 msg=f"{col} = {r[col]} is not a fraction in [0, 1]")
    return rows


def load_prefix(path=None) -> list[dict]:
    """Rows of ``docs/bench/prefix_cache.csv`` (the tiny engine's density benchmark)."""
    return _read_csv(PREFIX_CSV if path is None else path, PREFIX_REQUIRED,
                     ("budget_mb", "prompt_tokens", "cached_prompt_tokens", "48b_checkpoint_gib"))


def families_in(rows: list[dict], col: str = "family") -> list[str]:
    return list(dict.fromkeys(r[col] for r in rows))
