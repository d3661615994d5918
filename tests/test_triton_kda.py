"""Triton KDA kernels (``chunk_kda``, ``fused_recurrent_kda``) against the torch recurrence.

The oracle is :func:`kda_ref.ops.kda_recurrent.recurrent_kda` in float32 with l2-normalised q, k
(as fla's own tests do). On a CPU machine the kernels run under ``TRITON_INTERPRET=1``
(tests/conftest.py); shapes are kept small because the interpreter is slow.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kda_ref.ops.kda_recurrent import recurrent_kda
from kda_ref.ops.triton.kda_chunk import chunk_kda
from kda_ref.ops.triton.kda_fused_recurrent import fused_recurrent_kda
from kda_ref.utils import cdiv

pytestmark = pytest.mark.triton

TOL = 1e-4
#: the chunk kernel's tolerances against the float32 recurrence, by input dtype (max |diff|): float32 inputs
#: multiply in float32 everywhere; bfloat16 inputs on a GPU feed bfloat16 operands to the walk and the output
#: (kda_ref.ops.triton._common.dot_plan), so the chunk states drift by bf16's resolution over a sequence
CHUNK_TOL = {torch.float32: {"o": TOL, "state": TOL}, torch.bfloat16: {"o": 3e-2, "state": 2e-2}}


def make_inputs(gen, B, T, H, HV, K, V, gate_scale=1.0, dtype=torch.float32):
    """q, k l2-normalised; g = -softplus(randn) * gate_scale; beta = sigmoid(randn)."""
    q = F.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    k = F.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    v = torch.randn(B, T, HV, V, generator=gen)
    g = -F.softplus(torch.randn(B, T, HV, K, generator=gen)) * gate_scale
    beta = torch.randn(B, T, HV, generator=gen).sigmoid()
    return tuple(x.to(dtype) for x in (q, k, v, g, beta))


def assert_close(actual, expected, tol=TOL, what=""):
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    assert torch.isfinite(actual).all(), f"{what}: non-finite values"
    err = (actual.double() - expected.double()).abs().max().item()
    assert err <= tol, f"{what}: max |diff| {err:.3g} > {tol:.1g}"


def chunk_starts_states(step_states, h0, offs, C):
    """Reference h: the state at the start of every chunk, from the recurrence's per-token states.

    ``step_states`` is ``[B, T, HV, K, V]``; for varlen (``offs`` given) returns
    ``[1, sum_n ceil(L_n / C), HV, K, V]``, else ``[B, ceil(T / C), HV, K, V]``.
    """
    if offs is None:
        B, T = step_states.shape[:2]
        hs = [h0 if h0 is not None else torch.zeros_like(step_states[:, 0])]
        hs += [step_states[:, c * C - 1] for c in range(1, cdiv(T, C))]
        return torch.stack(hs, 1)
    out = []
    for n, (s, e) in enumerate(zip(offs, offs[1:])):
        out.append(h0[n] if h0 is not None else torch.zeros_like(step_states[0, 0]))
        out += [step_states[0, s + c * C - 1] for c in range(1, cdiv(e - s, C))]
    return torch.stack(out)[None]


# --------------------------------------------------------------------------------------------
# fused_recurrent_kda
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "B,T,H,HV,K,V,use_h0",
    [
        (2, 1, 1, 1, 16, 16, False),  # T = 1 (a decode step)
        pytest.param(2, 1, 2, 2, 16, 32, True, marks=pytest.mark.slow),
        (2, 37, 1, 2, 16, 32, True),  # grouped value heads
        pytest.param(1, 20, 2, 4, 32, 16, False, marks=pytest.mark.slow),  # two q/k heads, two value heads each
        (1, 9, 1, 1, 64, 64, True),  # K = V = 64: two V-blocks
        (1, 12, 1, 1, 8, 40, True),  # sizes that are not powers of two / below 16
    ],
)
def test_fused_recurrent_matches_reference(gen, B, T, H, HV, K, V, use_h0):
    q, k, v, g, beta = make_inputs(gen, B, T, H, HV, K, V)
    h0 = torch.randn(B, HV, K, V, generator=gen) if use_h0 else None
    h0_copy = None if h0 is None else h0.clone()
    o, ht = fused_recurrent_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    ro, rh = recurrent_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    assert o.dtype == v.dtype
    assert_close(o, ro, what="o")
    assert_close(ht, rh, what="final state")
    if h0 is not None:
        assert torch.equal(h0, h0_copy), "a read-only initial_state was modified"
    o2, none = fused_recurrent_kda(q, k, v, g, beta, initial_state=h0, scale=0.3)
    assert none is None
    assert_close(o2, recurrent_kda(q, k, v, g, beta, initial_state=h0, scale=0.3)[0], what="scale")


def test_fused_recurrent_step_states_varlen(gen):
    offs = [0, 1, 9, 21]
    q, k, v, g, beta = make_inputs(gen, 1, offs[-1], 1, 2, 16, 16)
    cu = torch.tensor(offs, dtype=torch.int32)
    h0 = torch.randn(3, 2, 16, 16, generator=gen)
    steps = torch.full((1, offs[-1], 2, 16, 16), float("nan"))
    o, ht = fused_recurrent_kda(
        q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu, step_states=steps
    )
    ro, rh, rsteps = recurrent_kda(
        q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu, return_step_states=True
    )
    assert_close(o, ro, what="o")
    assert_close(ht, rh, what="final state")
    assert_close(steps, rsteps, what="step states")


def test_has_initial_state_without_pool(gen):
    """has_initial_state also works with a plain (read-only) initial_state: False rows start at zero."""
    q, k, v, g, beta = make_inputs(gen, 3, 20, 1, 1, 16, 16)
    h0 = torch.randn(3, 1, 16, 16, generator=gen)
    h0[1] = float("nan")  # not read
    flags = torch.tensor([True, False, True])
    ref_h0 = torch.where(flags[:, None, None, None], h0, 0.0)
    ro, rh = recurrent_kda(q, k, v, g, beta, initial_state=ref_h0, output_final_state=True)
    for fn, kw in ((fused_recurrent_kda, {}), (chunk_kda, {"chunk_size": 16})):
        o, ht = fn(q, k, v, g, beta, initial_state=h0, output_final_state=True, has_initial_state=flags, **kw)
        assert_close(o, ro, what=f"{fn.__name__} o")
        assert_close(ht, rh, what=f"{fn.__name__} final state")


def test_fused_recurrent_state_pool(gen):
    """SGLang / vLLM decode form: states read from and written back to pool[state_indices]."""
    offs = [0, 3, 4, 11]
    N, P, HV, K, V = 3, 6, 2, 16, 16
    q, k, v, g, beta = make_inputs(gen, 1, offs[-1], 1, HV, K, V)
    cu = torch.tensor(offs)
    pool = torch.randn(P, HV, K, V, generator=gen)
    idx = torch.tensor([4, 0, 2])
    flags = torch.tensor([True, False, True])
    pool[0] = float("nan")  # slot of a sequence without initial state: must not be read
    before = pool.clone()
    o, ht = fused_recurrent_kda(
        q, k, v, g, beta, initial_state=pool, output_final_state=True, cu_seqlens=cu,
        state_indices=idx, has_initial_state=flags,
    )
    h0 = torch.where(flags[:, None, None, None], before[idx], 0.0)
    ro, rh = recurrent_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu)
    assert_close(o, ro, what="o")
    assert_close(ht, rh, what="returned final state")
    assert_close(pool[idx], rh, what="pool slots")
    others = [i for i in range(P) if i not in idx.tolist()]
    assert torch.equal(pool[others], before[others]), "pool slots outside state_indices changed"


# --------------------------------------------------------------------------------------------
# chunk_kda
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "B,T,H,HV,K,V,C,use_h0",
    [
        (2, 100, 1, 2, 16, 32, 64, True),  # T not a multiple of the chunk; grouped heads
        pytest.param(1, 100, 2, 4, 32, 16, 32, False, marks=pytest.mark.slow),  # two q/k heads, two value heads each
        pytest.param(1, 45, 1, 1, 16, 16, 16, True, marks=pytest.mark.slow),
        (1, 50, 1, 1, 8, 40, 32, True),  # sizes that are not powers of two / below 16
        (1, 1, 1, 2, 16, 16, 64, True),  # T = 1
        (1, 80, 1, 1, 64, 64, 64, True),  # K = V = 64, partial second chunk
    ],
)
def test_chunk_matches_reference(gen, B, T, H, HV, K, V, C, use_h0):
    q, k, v, g, beta = make_inputs(gen, B, T, H, HV, K, V)
    h0 = torch.randn(B, HV, K, V, generator=gen) if use_h0 else None
    h0_copy = None if h0 is None else h0.clone()
    o, ht, hs = chunk_kda(
        q, k, v, g, beta, initial_state=h0, output_final_state=True, chunk_size=C,
        return_intermediate_states=True,
    )
    ro, rh, steps = recurrent_kda(
        q, k, v, g, beta, initial_state=h0, output_final_state=True, return_step_states=True
    )
    assert o.dtype == v.dtype
    assert_close(o, ro, what="o")
    assert_close(ht, rh, what="final state")
    assert hs.shape == (B, cdiv(T, C), HV, K, V)
    assert_close(hs, chunk_starts_states(steps, h0, None, C), what="chunk-start states h")
    if h0 is not None:
        assert torch.equal(h0, h0_copy), "a read-only initial_state was modified"


@pytest.mark.parametrize("C", [pytest.param(32, marks=pytest.mark.slow), 16])
def test_chunk_varlen(gen, C):
    offs = [0, 1, 38, 108]  # lengths 1, 37, 70: none a multiple of the chunk
    HV, K, V = 2, 16, 16
    q, k, v, g, beta = make_inputs(gen, 1, offs[-1], 1, HV, K, V)
    cu = torch.tensor(offs, dtype=torch.int32)
    h0 = torch.randn(3, HV, K, V, generator=gen)
    o, ht, hs = chunk_kda(
        q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu, chunk_size=C,
        return_intermediate_states=True,
    )
    ro, rh, steps = recurrent_kda(
        q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu, return_step_states=True
    )
    assert_close(o, ro, what="o")
    assert_close(ht, rh, what="final state")
    n_chunks = sum(cdiv(e - s, C) for s, e in zip(offs, offs[1:]))
    assert hs.shape == (1, n_chunks, HV, K, V)
    assert_close(hs, chunk_starts_states(steps, h0, offs, C), what="chunk-start states h")


def test_chunk_state_pool_then_decode(gen):
    """Prefill with chunk_kda into a state pool, then decode with fused_recurrent_kda from it."""
    offs = [0, 5, 40]
    N, P, HV, K, V = 2, 5, 2, 16, 16
    T_dec = 3
    q, k, v, g, beta = make_inputs(gen, 1, offs[-1] + N * T_dec, 1, HV, K, V)
    pool = torch.randn(P, HV, K, V, generator=gen)
    idx = torch.tensor([3, 1])
    flags = torch.tensor([False, True])
    pool[3] = float("nan")  # never read: has_initial_state is False for that sequence
    before = pool.clone()
    pre = slice(0, offs[-1])
    o, ht = chunk_kda(
        q[:, pre], k[:, pre], v[:, pre], g[:, pre], beta[:, pre], initial_state=pool,
        output_final_state=True, cu_seqlens=torch.tensor(offs), chunk_size=16,
        state_indices=idx, has_initial_state=flags,
    )
    h0 = torch.where(flags[:, None, None, None], before[idx], 0.0)
    ro, rh = recurrent_kda(
        q[:, pre], k[:, pre], v[:, pre], g[:, pre], beta[:, pre], initial_state=h0,
        output_final_state=True, cu_seqlens=torch.tensor(offs),
    )
    assert_close(o, ro, what="prefill o")
    assert_close(ht, rh, what="returned final state")
    assert_close(pool[idx], rh, what="pool slots after prefill")
    assert torch.equal(pool[[0, 2, 4]], before[[0, 2, 4]]), "pool slots outside state_indices changed"

    # decode T_dec tokens for both sequences as a batch [N, T_dec], states from the pool
    dec = slice(offs[-1], None)

    def as_batch(x):  # [1, N * T_dec, ...] -> [N, T_dec, ...]
        return x[:, dec].reshape(N, T_dec, *x.shape[2:])

    dq, dk, dv, dg, db = (as_batch(x) for x in (q, k, v, g, beta))
    o_dec, _ = fused_recurrent_kda(dq, dk, dv, dg, db, initial_state=pool, state_indices=idx)
    ro_dec, rh_dec = recurrent_kda(dq, dk, dv, dg, db, initial_state=rh, output_final_state=True)
    assert_close(o_dec, ro_dec, what="decode o")
    assert_close(pool[idx], rh_dec, what="pool slots after decode")


def test_half_precision_inputs(gen):
    offs = [0, 7, 50]
    cu = torch.tensor(offs)
    q, k, v, g, beta = make_inputs(gen, 1, offs[-1], 1, 2, 16, 16, dtype=torch.float16)
    h0 = torch.randn(2, 2, 16, 16, generator=gen)
    ro, rh = recurrent_kda(q.float(), k.float(), v.float(), g.float(), beta.float(), initial_state=h0,
                           output_final_state=True, cu_seqlens=cu)
    for name, fn, kw in (("chunk", chunk_kda, {"chunk_size": 32}), ("recurrent", fused_recurrent_kda, {})):
        o, ht = fn(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu, **kw)
        assert o.dtype == torch.float16, name
        assert_close(o.float(), ro, tol=4e-3, what=f"{name} o (fp16 output)")
        assert_close(ht, rh, what=f"{name} final state")


NATIVE = bool(__import__("os").environ.get("KDA_TRITON_NATIVE")) and torch.cuda.is_available()


@pytest.mark.skipif(not NATIVE, reason="bfloat16 arithmetic is wrong in Triton's interpreter: runs natively on a GPU "
                                       "(KDA_TRITON_NATIVE=1, scripts/gpu_check.py)")
@pytest.mark.parametrize("T", [50, 300])
def test_bfloat16_inputs_natively(gen, T):
    """bf16 q, k, v, g, beta (the dtype served): outputs within bf16's resolution of the float32 recurrence
    on the same rounded inputs; final states (accumulated in float32) within :data:`CHUNK_TOL` for the chunk
    kernel, whose walk multiplies bf16 operands, and 2e-3 for the recurrent one."""
    offs = [0, 7, T]
    cu = torch.tensor(offs)
    q, k, v, g, beta = make_inputs(gen, 1, T, 2, 4, 64, 64, dtype=torch.bfloat16)
    h0 = torch.randn(2, 4, 64, 64, generator=gen)
    ro, rh = recurrent_kda(q.float(), k.float(), v.float(), g.float(), beta.float(), initial_state=h0,
                           output_final_state=True, cu_seqlens=cu)
    tol = CHUNK_TOL[torch.bfloat16]
    for name, fn, kw, state_tol in (("chunk", chunk_kda, {"chunk_size": 64}, tol["state"]),
                                    ("recurrent", fused_recurrent_kda, {}, 2e-3)):  # float32 state arithmetic
        o, ht = fn(q, k, v, g, beta, initial_state=h0, output_final_state=True, cu_seqlens=cu, **kw)
        assert o.dtype == torch.bfloat16, name
        assert_close(o.float(), ro, tol=tol["o"], what=f"{name} o (bf16 output)")
        assert_close(ht, rh, tol=state_tol, what=f"{name} final state")


@pytest.fixture
def faithful_bf16_dot(monkeypatch):
    """Triton's interpreter keeps bfloat16 values as their 16-bit patterns (uint16) and its ``tl.dot`` multiplies
    those integers (it widens fp8 operands only): widen bfloat16 operands to float32 first -- exact, a bf16 is
    the top half of an fp32 -- so the kernels' bfloat16 path can run on the CPU."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = getattr(interpreter, "InterpreterBuilder", None)
    if builder is None or not hasattr(builder, "create_dot") or not hasattr(interpreter, "TensorHandle"):
        pytest.skip("this Triton's interpreter has no InterpreterBuilder.create_dot to widen")
    original = builder.create_dot

    def widen(x):
        if x.dtype.scalar != tl.bfloat16:
            return x
        return interpreter.TensorHandle((x.data.astype(np.uint32) << 16).view(np.float32), tl.float32)

    monkeypatch.setattr(builder, "create_dot", lambda self, a, b, *rest: original(self, widen(a), widen(b), *rest))


@pytest.mark.skipif(NATIVE, reason="on a GPU the bfloat16 path runs natively (test_bfloat16_inputs_natively)")
@pytest.mark.parametrize("C,varlen", [pytest.param(64, False, marks=pytest.mark.slow), (16, True)])
def test_bfloat16_operands_in_the_interpreter(gen, faithful_bf16_dot, monkeypatch, C, varlen):
    """The path a GPU takes for bfloat16 inputs (bf16 workspaces, casts before every dot, stores into bf16),
    forced in the interpreter: within :data:`CHUNK_TOL` of the float32 recurrence on the same rounded inputs,
    and not the float32 path's answer. The chunk states it returns are float32; kept only for the output
    kernel, they are bf16 too."""
    from kda_ref.ops.triton import kda_chunk
    from kda_ref.ops.triton._common import DotPlan

    T, HV = 100, 2
    offs = [0, 33, T] if varlen else None
    cu = torch.tensor(offs) if varlen else None
    q, k, v, g, beta = make_inputs(gen, 1 if varlen else 2, T, 1, HV, 32, 32, dtype=torch.bfloat16)
    h0 = 0.1 * torch.randn(2, HV, 32, 32, generator=gen)
    kw = dict(initial_state=h0, output_final_state=True, cu_seqlens=cu, chunk_size=C)
    o_f32, _ = chunk_kda(q, k, v, g, beta, **kw)  # this machine's own plan: float32 operands
    monkeypatch.setattr(kda_chunk, "dot_plan", lambda device, *dtypes: DotPlan(torch.bfloat16, "ieee"))
    o, ht, hs = chunk_kda(q, k, v, g, beta, return_intermediate_states=True, **kw)
    o_bf, ht_bf = chunk_kda(q, k, v, g, beta, **kw)  # the states kept in bf16
    ro, rh, steps = recurrent_kda(*(x.float() for x in (q, k, v, g, beta)), initial_state=h0,
                                  output_final_state=True, cu_seqlens=cu, return_step_states=True)
    tol = CHUNK_TOL[torch.bfloat16]
    assert hs.dtype == torch.float32
    assert_close(hs, chunk_starts_states(steps, h0, offs, C), tol=tol["state"], what="chunk states (bf16 walk)")
    for out, state, what in ((o, ht, "float32 states"), (o_bf, ht_bf, "bf16 states")):
        assert_close(out.float(), ro, tol=tol["o"], what=f"o, {what}")
        assert_close(state, rh, tol=tol["state"], what=f"final state, {what}")
    assert not torch.equal(o_bf, o_f32), "the forced bf16 plan gave the float32 path's answer"


def test_dot_plan_is_float32_off_the_gpu():
    """The chunk kernels' one choice of arithmetic: float32 operands wherever bfloat16 is not native (the
    interpreter's bf16 is not faithful), whatever the inputs' dtype; bfloat16 operands only for bfloat16
    inputs on a GPU."""
    from kda_ref.ops.triton._common import dot_plan

    cpu = torch.device("cpu")
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        plan = dot_plan(cpu, dt)
        assert plan.operand == torch.float32 and plan.precision == "ieee", dt
    if torch.cuda.is_available():
        gpu = torch.device("cuda")
        assert dot_plan(gpu, torch.bfloat16).operand == torch.bfloat16
        assert dot_plan(gpu, torch.float32).operand == torch.float32


@pytest.mark.parametrize("gate", [pytest.param("uniform_to_-5", marks=pytest.mark.slow),
                                  pytest.param("constant_-5", marks=pytest.mark.slow), "very_strong"])
def test_strong_decay(gen, gate):
    """Strongly decaying gates: exp(-G) over a chunk would overflow; the kernels must stay finite."""
    B, T, HV, K, V = 1, 70, 2, 16, 16
    q, k, v, g, beta = make_inputs(gen, B, T, 1, HV, K, V)
    if gate == "uniform_to_-5":
        g = -5.0 * torch.rand(B, T, HV, K, generator=gen)
    elif gate == "constant_-5":
        g = torch.full((B, T, HV, K), -5.0)
    else:  # a mix of no decay and decays of up to -60 per step (exp(64 * 60) is far beyond fp32)
        g = -60.0 * torch.rand(B, T, HV, K, generator=gen) ** 4
    h0 = torch.randn(B, HV, K, V, generator=gen)
    ro, rh, steps = recurrent_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                  return_step_states=True)
    o, ht, hs = chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                          return_intermediate_states=True)
    assert_close(o, ro, what="chunk o")
    assert_close(ht, rh, what="chunk final state")
    assert_close(hs, chunk_starts_states(steps, h0, None, 64), what="chunk h")
    o2, ht2 = fused_recurrent_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    assert_close(o2, ro, what="recurrent o")
    assert_close(ht2, rh, what="recurrent final state")


# --------------------------------------------------------------------------------------------
# bad inputs: ValueError naming the argument, pool untouched
# --------------------------------------------------------------------------------------------


def test_bad_inputs_raise_and_leave_pool_untouched(gen):
    q, k, v, g, beta = make_inputs(gen, 1, 6, 1, 1, 16, 16)
    cu = torch.tensor([0, 2, 6])
    pool = torch.randn(4, 1, 16, 16, generator=gen)
    before = pool.clone()
    both = (chunk_kda, fused_recurrent_kda)

    for fn in both:
        for bad_idx in (torch.tensor([1, 1]), torch.tensor([0, 4]), torch.tensor([-1, 0]), torch.tensor([2])):
            with pytest.raises(ValueError, match="state_indices"):
                fn(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu, state_indices=bad_idx)
        with pytest.raises(ValueError, match="state_indices"):
            fn(q, k, v, g, beta, cu_seqlens=cu, state_indices=torch.tensor([0, 1]))  # no pool
    with pytest.raises(ValueError, match="chunk_size"):
        chunk_kda(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu, state_indices=torch.tensor([0, 1]),
                  chunk_size=48)
    for bad_steps in (torch.zeros(1, 5, 1, 16, 16), torch.zeros(1, 6, 1, 16, 16, dtype=torch.float64)):
        with pytest.raises(ValueError, match="step_states"):
            fused_recurrent_kda(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu,
                                state_indices=torch.tensor([0, 1]), step_states=bad_steps)
    assert torch.equal(pool, before), "a rejected call wrote to the state pool"

    # K or V over 256
    qb, kb, vb, gb, bb = make_inputs(gen, 1, 2, 1, 1, 512, 16)
    for fn in both:
        with pytest.raises(ValueError, match=r"^k: Triton kernels support K, V <= 256"):
            fn(qb, kb, vb, gb, bb)
    qb, kb, vb, gb, bb = make_inputs(gen, 1, 2, 1, 1, 16, 512)
    for fn in both:
        with pytest.raises(ValueError, match=r"^v: Triton kernels support K, V <= 256"):
            fn(qb, kb, vb, gb, bb)
    # shared layout checks (kda_ref.ops._checks) are reused
    with pytest.raises(ValueError, match="^g:"):
        chunk_kda(q, k, v, g[..., :8], beta)


@pytest.mark.slow
def test_long_sequence_matches_torch_chunk_form():
    """Long T (ten chunks, K = V = 128 as in Kimi-Linear) through the Triton chunk kernel equals
    the torch chunk form, output and final state (about 20 s under the interpreter)."""
    from kda_ref.ops import chunk_kda as torch_chunk_kda
    from kda_inputs import make_kda_inputs, make_state

    q, k, v, g, b = make_kda_inputs(1, 640, 1, 128, 128, gate_scale=0.2, seed=5)
    h0 = make_state(1, 1, 128, 128, seed=6)
    o_ref, s_ref = torch_chunk_kda(q, k, v, g, b, initial_state=h0, output_final_state=True)
    o, s = chunk_kda(q, k, v, g, b, initial_state=h0, output_final_state=True)
    torch.testing.assert_close(o, o_ref, atol=1e-4, rtol=0)
    torch.testing.assert_close(s, s_ref, atol=1e-4, rtol=0)
