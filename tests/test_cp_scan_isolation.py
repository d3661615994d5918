"""A wrong scan shown by the "Context parallelism" page stays inside its own call.

The app serves every browser session from one process. The page once showed its two wrong ways (every
rank from zero; the states added) by swapping ``kda_ref.context_parallel.forward.exclusive_scan`` for the whole
process: a threads-backend prefill of another session meanwhile folded with the wrong scan (11 of 49
prefills had wrong logits), and two patches exiting out of order left a wrong scan installed for good.
The scan is now the ``scan=`` argument of :func:`~kda_ref.context_parallel.context_parallel_prefill`; here the
page's wrong ways run on two threads while a third runs ordinary prefills of the same model.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

import kda_ref.context_parallel.forward
import kda_ref.context_parallel.maps
from kda_ref.model import HybridModel, ModelConfig, RequestCache
from kda_ref.context_parallel import context_parallel_prefill
from model_viz.scenarios import context_parallel as cp

CFG = ModelConfig.micro()
R = 3
RIGHT_RUNS = 12  # ordinary prefills; the wrong ways loop until these are done
JOIN_S = 120.0


@pytest.fixture(scope="module")
def model():
    return HybridModel(CFG, seed=0).eval()


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, CFG.vocab_size, (48,), generator=torch.Generator().manual_seed(0)).tolist()


def _single(model, ids):
    cache = RequestCache(model.config, 1, max_tokens=64, page_size=16)
    with torch.no_grad():
        return model(torch.tensor(ids), cache.batch([len(ids)]), cache.tensors, logits="last")


def _loop(runs: list, errors: list, step, until: threading.Event | None, times: int | None) -> None:
    """Call ``step()`` ``times`` times, or until ``until`` is set (at least twice); record ``(start, end,
    result)`` of each in ``runs`` and any exception in ``errors``."""
    try:
        while (times is not None and len(runs) < times) or (until is not None and (not until.is_set()
                                                                                 or len(runs) < 2)):
            t0 = time.perf_counter()
            out = step()
            runs.append((t0, time.perf_counter(), out))
    except BaseException as err:  # noqa: BLE001 -- reported by the test
        errors.append(err)


def test_a_wrong_scan_on_other_threads_leaves_an_ordinary_prefill_right(model, ids):
    single = _single(model, ids)
    diff = lambda res: float((res.logits - single).abs().max())  # noqa: E731
    done, errors = threading.Event(), []
    right, wrong = [], {m: [] for m in cp.METHODS if m != "scan"}

    def ordinary():
        _loop(right, errors, lambda: diff(context_parallel_prefill(model, [ids], world_size=R, backend="threads")),
              None, RIGHT_RUNS)
        done.set()

    threads = [threading.Thread(target=ordinary, daemon=True)]
    threads += [threading.Thread(target=_loop, args=(runs, errors, lambda m=m: diff(cp.prefill(model, ids, R, m)),
                                                     done, None), daemon=True) for m, runs in wrong.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    assert not any(t.is_alive() for t in threads), "a prefill thread did not finish"
    assert not errors, errors
    bad = [d for _, _, d in right if not d <= cp.SAME_TOL]
    assert len(right) == RIGHT_RUNS and not bad, f"{len(bad)} of {len(right)} ordinary prefills wrong: {bad[:5]}"
    for m, runs in wrong.items():  # the wrong ways did run wrong, and while the ordinary prefills ran
        assert all(d > 1e-2 for _, _, d in runs), (m, [d for _, _, d in runs])
        assert any(a0 < b1 and b0 < a1 for a0, a1, _ in runs for b0, b1, _ in right), f"{m} never overlapped"
    assert kda_ref.context_parallel.forward.exclusive_scan is kda_ref.context_parallel.maps.exclusive_scan


def test_the_scan_is_an_argument_of_the_call(model, ids):
    calls = []

    def counting(maps, initial=None):
        calls.append(len(maps))
        return kda_ref.context_parallel.maps.exclusive_scan(maps, initial)

    res = context_parallel_prefill(model, [ids], world_size=R, backend="threads", scan=counting)
    torch.testing.assert_close(res.logits, _single(model, ids), atol=cp.SAME_TOL, rtol=0)
    assert calls == [R] * (R * len(CFG.kda_layer_ids))  # every rank folds every KDA layer's R maps


@pytest.mark.parametrize("backend,scan,match", [
    ("gloo", cp._wrong_scan("zero"), "scan: a replacement scan runs only with backend='threads'"),
    ("threads", "exclusive_scan", "scan: must be a callable"),
])
def test_a_scan_the_backend_cannot_run_is_refused_before_any_rank_starts(model, backend, scan, match):
    with pytest.raises(ValueError, match=match):
        context_parallel_prefill(model, [[1, 2, 3]], world_size=2, backend=backend, scan=scan)


def test_the_page_rejects_an_unknown_method(model, ids):
    with pytest.raises(ValueError, match="method"):
        cp.prefill(model, ids, R, "sum")
