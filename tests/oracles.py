"""Access to third-party oracles (fla's naive KDA, transformers' Kimi-Linear) for the tests.

Both are optional: the helpers call ``pytest.importorskip`` so tests skip cleanly when absent.
transformers' Kimi-Linear dispatches KDA to fla's Triton kernels when fla is importable, which
fails without a GPU; we rebind its two KDA functions to their pure-torch ``__wrapped__`` bodies.
"""

from __future__ import annotations

import pytest


def fla_naive():
    pytest.importorskip("einops")
    pytest.importorskip("triton")
    try:
        from fla.ops.kda import naive
    except Exception as e:  # fla absent or broken on this platform
        pytest.skip(f"flash-linear-attention not importable: {e}")
    return naive


def hf_kimi_linear():
    pytest.importorskip("transformers")
    try:
        from transformers.models.kimi_linear import modeling_kimi_linear as mk
        from transformers import KimiLinearForCausalLM  # noqa: F401
    except Exception as e:
        pytest.skip(f"transformers Kimi-Linear not importable: {e}")
    for name in ("chunk_kimi_delta_attention", "recurrent_kimi_delta_attention"):
        fn = getattr(mk, name)
        setattr(mk, name, getattr(fn, "__wrapped__", fn))
    return mk
