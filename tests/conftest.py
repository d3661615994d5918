"""Test setup shared by every test module.

TRITON_INTERPRET=1 must be in the environment before any module that defines a ``@triton.jit``
kernel is imported; on a machine with a GPU set KDA_TRITON_NATIVE=1 to run the kernels natively.
"""

import os

if not os.environ.get("KDA_TRITON_NATIVE"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

# one intra-op thread: the test shapes are small, and two threads spin-wait badly when the two
# cores are shared (a second pytest, a Streamlit server in the browser test)
torch.set_num_threads(1)


@pytest.fixture
def gen():
    """A seeded generator so every test draws the same numbers on every run."""
    return torch.Generator().manual_seed(1234)
