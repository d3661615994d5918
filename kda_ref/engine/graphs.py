"""The graph API the static steps are captured with: CUDA's, or an emulation of its contract on any device.

Article concept ``static.pad_rows`` (the summary table's CUDA-graph row). The capturing code
(:meth:`kda_ref.engine.static_decode.StaticDecode._capture`) keeps three rules of ``torch.cuda.CUDAGraph``:
a capture runs nothing (the warm-up's writes are put back), the outputs are buffers every replay overwrites
(copy what you keep), a replay runs no Python (the recorded trace hooks are re-emitted). :class:`CudaGraphs`
is ``torch.cuda``'s API; :class:`EmulatedGraphs` keeps the rules on any device, so the capture path is tested
without a GPU. Counterpart: SGLang's ``cuda_graph_runner.py::CudaGraphRunner`` (``capture``,
``capture_one_batch_size``, ``replay``). Design notes: ``docs/architecture.md#static-buckets-and-cuda-graphs``.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch

from ..model.output import ForwardOutput


def output_tensors(out: ForwardOutput) -> list[torch.Tensor]:
    """Every tensor of a step's output, in a fixed order (logits, greedy, hidden states, per-token states,
    trajectories): the buffers a captured step returns."""
    ts = [out.logits] + ([] if out.greedy is None else [out.greedy]) + ([] if out.hidden is None else [out.hidden])
    for layer in sorted(out.step_states):
        st = out.step_states[layer]
        ts += [st.seq_ids, *st.positions, st.recurrent, st.conv]
    for layer in sorted(out.trajectories):
        tr = out.trajectories[layer]
        ts += [tr.seq_ids, *tr.tensors()]
    return ts


class CudaGraphs:
    """``torch.cuda``'s graphs: warm up on a side stream, capture, replay."""

    mode = "cuda_graph"

    @contextlib.contextmanager
    def warmup(self):
        """Run the block on a side stream that waits for, and is waited for by, the current one."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            yield
        torch.cuda.current_stream().wait_stream(side)

    def capture(self, step: Callable[[], ForwardOutput], written: Sequence[torch.Tensor]):
        """``(graph, output)``: ``step`` recorded into a new graph, and the buffers it returns. ``written``
        (the tensors the step may write) is what an emulation has to put back; a real capture writes
        nothing."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        return graph, out


class _EmulatedGraph:
    def __init__(self, step: Callable[[], ForwardOutput], output: ForwardOutput):
        self.step, self.buffers = step, output_tensors(output)
        self.replays = 0

    def replay(self) -> None:
        """Run the step and write its results into the captured output buffers (rule 2)."""
        fresh = output_tensors(self.step())
        if [t.shape for t in fresh] != [t.shape for t in self.buffers]:
            raise RuntimeError("emulated graph: a replay returned outputs of other shapes than its capture "
                               "(the step is not static)")
        for dst, src in zip(self.buffers, fresh):
            dst.copy_(src)
        self.replays += 1


class EmulatedGraphs:
    """The three rules of CUDA graphs on any device (see the module docstring): a capture that leaves
    every ``written`` tensor as it found it, outputs overwritten in place by every replay."""

    mode = "emulated_graph"

    def __init__(self):
        self.captures = 0

    @contextlib.contextmanager
    def warmup(self):
        yield

    def capture(self, step: Callable[[], ForwardOutput], written: Sequence[torch.Tensor]):
        saved = [t.clone() for t in written]
        out = step()  # allocates the output buffers; its writes are undone: a capture records only (rule 1)
        for t, s in zip(written, saved):
            t.copy_(s)
        self.captures += 1
        return _EmulatedGraph(step, out), out
