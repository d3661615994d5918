"""Test setup shared by every test module.

TRITON_INTERPRET=1 must be in the environment before any module that defines a ``@triton.jit``
kernel is imported; on a machine with a GPU set KDA_TRITON_NATIVE=1 to run the kernels natively.
"""

import os
import sys

# The suite starts Python processes that import this package (a Streamlit server, the CLI, context-
# parallel and disaggregation workers): each reuses the bytecode the first compiled, and pytest keeps
# its rewritten test modules between runs, even where the environment sets PYTHONDONTWRITEBYTECODE
# (the files go to the usual, git-ignored __pycache__ folders).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

if not os.environ.get("KDA_TRITON_NATIVE"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

# one intra-op thread: the test shapes are small, and two threads spin-wait badly when the two
# cores are shared (a second pytest, a Streamlit server in the browser test)
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _one_thread_again():
    """A benchmark run in a test sets torch's threads for the whole process: set them back after each test,
    so the next test's numbers do not depend on which ran before it."""
    yield
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _drawn_in_its_language(request):
    """A test parametrized by ``lang`` draws in that language (``model_viz.i18n.language``: figures and tables
    read it from the context); every other test in English, whatever ran before it."""
    from model_viz.i18n import DEFAULT_LANG, language

    lang = request.getfixturevalue("lang") if "lang" in request.fixturenames else DEFAULT_LANG
    with language(lang if isinstance(lang, str) else DEFAULT_LANG):
        yield


@pytest.fixture
def gen():
    """A seeded generator so every test draws the same numbers on every run."""
    return torch.Generator().manual_seed(1234)


def _run_on_the_gpu(fn):
    """``fn`` (a Triton kernel entry point) with its CPU tensor arguments copied to the GPU, what it
    returns copied back, and what it wrote in place (a state pool) written back into the CPU tensors:
    the kernel tests build their inputs and references on the CPU and run unchanged with
    ``KDA_TRITON_NATIVE=1`` (``scripts/gpu_check.py`` step ``triton``)."""
    import functools

    def back(x):
        if isinstance(x, torch.Tensor):
            return x.cpu()
        if isinstance(x, (tuple, list)):
            return type(x)(back(y) for y in x)
        return x

    @functools.wraps(fn)
    def run(*args, **kwargs):
        moved = []

        def there(x):
            if isinstance(x, torch.Tensor) and x.device.type == "cpu":
                moved.append((x, x.cuda()))
                return moved[-1][1]
            return x

        args = [there(a) for a in args]
        kwargs = {k: there(v) for k, v in kwargs.items()}
        out = fn(*args, **kwargs)
        for cpu, gpu in moved:  # in-place writes (state pools, step states) come back
            if not torch.equal(cpu, gpu.cpu()):
                cpu.copy_(gpu.cpu())
        return back(out)

    return run


if os.environ.get("KDA_TRITON_NATIVE") and torch.cuda.is_available():
    import kda_ref.ops.triton as _tk
    from kda_ref.ops.triton import kda_chunk as _chunk, kda_fused_recurrent as _rec, mla_decode as _mla

    for _mod, _name in ((_chunk, "chunk_kda"), (_rec, "fused_recurrent_kda"), (_mla, "paged_mla_decode")):
        _wrapped = _run_on_the_gpu(getattr(_mod, _name))
        setattr(_mod, _name, _wrapped)
        setattr(_tk, _name, _wrapped)

