"""A prefill step moves no more data than it needs: its gathers, concatenations and indexed writes are
counted (every aten call of those kinds under a dispatch mode) and pinned, for a step of equal prompts
(one phase group: views, a regular chunk batch, one MLA attention call) and a ragged one. A change that
adds a copy to the step fails here; one that removes some lowers the pins."""

from __future__ import annotations

import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kda_ref import LLM, SamplingParams
from kda_ref.model import HybridModel, ModelConfig

KINDS = {
    "gathers": ("index.Tensor", "index_select.default", "gather.default"),
    "concatenations": ("cat.default", "stack.default"),
    "indexed writes": ("index_copy_.default", "index_put_.default", "index_add_.default", "scatter_.value",
                       "scatter_.src"),
}
# measured 2026-12-06 on the tiny model (4 layers: 3 KDA, 1 MLA; MoE of 4 experts in layers 1-3)
PINS = {
    "equal": {"gathers": 40, "concatenations": 31, "indexed writes": 33},
    "ragged": {"gathers": 69, "concatenations": 24, "indexed writes": 42},
}


class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls[func.__name__] += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def llm():
    return LLM(HybridModel(ModelConfig.tiny(), seed=0).eval(), max_num_batched_tokens=1024, max_num_seqs=8)


@pytest.mark.parametrize("case,lens", [("equal", [64, 64, 64, 64]), ("ragged", [64, 30, 100, 7])])
def test_a_prefill_step_copies_no_more_than_it_did(llm, case, lens):
    gen = torch.Generator().manual_seed(0)
    for n in lens:
        llm.add_request(torch.randint(0, 256, (n,), generator=gen).tolist(), SamplingParams(max_tokens=1, ignore_eos=True))
    with _Count() as count:
        llm.step()  # every prompt whole in one step
    while llm.has_unfinished():
        llm.step()
    got = {kind: sum(count.calls[name] for name in names) for kind, names in KINDS.items()}
    assert all(got[k] <= PINS[case][k] for k in KINDS), f"{case}: {got} against the pins {PINS[case]}"
    assert sum(count.calls.values()) > 500  # the count saw the step
