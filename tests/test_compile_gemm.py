"""``LLM(compile_gemm=True)``: the compiled steps' matrix products through inductor's C++ GEMM template over
weights frozen into the graph (:data:`kda_ref.utils.compiling.GEMM_OPTIONS`).

The default run compiles one small function both ways and reads the code inductor generated (the template's
micro-kernel is there with ``gemm=True`` and absent without), and checks the options are refused where
they mean nothing. The slow run serves the trained K3 demo with MTP drafts compiled this way: plain
decoding's tokens, every bucket and draft chain compiled (none fell back to eager)."""

from __future__ import annotations

import pytest
import torch

from kda_ref import LLM, ModelConfig
from kda_ref.engine.static_decode import cpp_compiler
from kda_ref.utils.compiling import compile_and_run

needs_compiler = pytest.mark.skipif(cpp_compiler() is None, reason="inductor needs a C++ compiler on the CPU")


class _Projection(torch.nn.Module):
    """``relu(x @ W)`` with ``W`` a module's tensor, as the model's fused weights are (a constant once frozen)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.randn(64, 96, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        return torch.mm(x, self.w).relu()


def _generated(gemm: bool):
    """Compile ``x @ W`` (4 rows, a fixed weight, as a verify step's projection) and return the output, the
    eager one and inductor's generated code."""
    from torch._inductor.utils import run_and_get_code

    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
    fn = _Projection()
    with torch.no_grad():
        (out, step, _), code = run_and_get_code(compile_and_run, fn, (x,), "a test product", None, gemm)
    assert step is not None, "the compilation failed"
    return out, fn(x), "\n".join(code)


@needs_compiler
def test_gemm_compiles_the_product_as_the_cpp_template_and_computes_the_same():
    out, ref, code = _generated(gemm=True)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert "micro_gemm" in code  # the template's kernel, over the frozen, prepacked weight
    out, ref, code = _generated(gemm=False)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert "micro_gemm" not in code and "extern_kernels.mm" in code  # the default: MKL's sgemm, called by the graph


def test_compile_gemm_needs_torch_compile():
    with pytest.raises(ValueError, match="compile_gemm.*torch_compile=True"):
        LLM(ModelConfig.tiny(), static_decode=True, compile_gemm=True)


@pytest.mark.parametrize("bad", ["yes", 1])
def test_compile_gemm_must_be_a_bool(bad):
    with pytest.raises(ValueError, match="compile_gemm"):
        LLM(ModelConfig.tiny(), static_decode=True, torch_compile=True, compile_gemm=bad)


def test_the_bench_refuses_compile_gemm_without_torch_compile(capsys):
    from kda_ref.bench.args import parse

    with pytest.raises(SystemExit):
        parse("spec-mtp", ["--compile-gemm"])
    assert "--compile-gemm: only with --torch-compile" in capsys.readouterr().err


@pytest.mark.slow
@needs_compiler
def test_k3_with_mtp_drafts_compiled_through_the_template_keeps_plain_decodings_tokens():
    from kda_ref import SamplingParams
    from kda_ref.bench.spec_mtp import mtp_workloads
    from kda_ref.train import load_trained

    model = load_trained(kind="k3")
    prompt = [model.config.bos_token_id, *mtp_workloads()["held-out"][:120]]
    p = SamplingParams(max_tokens=24, ignore_eos=True)
    want = LLM(model).generate([prompt], p, use_tqdm=False)[0].token_ids
    llm = LLM(model, static_decode=True, torch_compile=True, compile_gemm=True, speculative="mtp",
              num_speculative_tokens=3)
    for _ in range(3):  # a bucket's first step runs eagerly, its second compiles it, the third runs the graph
        assert llm.generate([prompt], p, use_tqdm=False)[0].token_ids == want
    buckets = llm.runner.static.buckets.values()
    assert buckets and all(b.compiled is not None and not b.compile_failed for b in buckets)
    chains = llm.scheduler.speculation.drafter.static.shapes.values()
    assert chains and all(s.compiled is not None and not s.failed for s in chains)
