"""The graph API the static steps are captured with: CUDA's, or an emulation of its contract on any device.

Article concept ``static.pad_rows`` (the summary table's CUDA-graph row). A CUDA graph
(``torch.cuda.CUDAGraph``) records a step's kernels once and replays them on the buffers it recorded.
Three rules follow for the code that captures (:meth:`kda_ref.engine.static_decode.StaticDecode._capture`):

1. **Capture runs nothing.** Kernels are recorded, not executed, so the warm-up run before the capture
   (on a side stream, as ``torch.cuda.graphs`` asks) is the one that advanced the states and wrote
   the KV rows: they must be put back before the first replay runs the step for real.
2. **The outputs are fixed buffers.** What the captured step returned lives in memory the graph owns;
   every replay overwrites it, so a caller that keeps a step's output must copy it before the next
   replay.
3. **A replay runs no Python.** A trace hook called by the step fires during capture only; what it
   recorded is re-emitted per replay.

SGLang (``python/sglang/srt/model_executor/cuda_graph_runner.py``, commit 0021673c) captures every
batch size at startup (``CudaGraphRunner.capture``, largest first): ``capture_one_batch_size`` runs the
forward twice on the dummy metadata of its buffers, then records it under
``torch.cuda.graph(graph, pool=global_graph_memory_pool, stream=stream)``; ``replay`` copies the batch
into the buffers, replays, and returns views of the output buffers, which the caller samples before
the next replay. Where we differ: a bucket is captured lazily, in its first step and on that step's
live metadata, so its warm-up's writes are put back; and the live rows of the outputs are copied out,
because a step's output may be kept past the next step (the tracer, the prefix cache's per-step
states).

:class:`CudaGraphs` is ``torch.cuda``'s API. :class:`EmulatedGraphs` keeps the three rules on any
device, so the capture path is tested on machines without a GPU: its capture runs the step once (to
allocate the outputs) and puts back every tensor the step may write, and its replay runs the step
again and copies the results into the captured outputs. What the emulation cannot show: a host value
read during capture and baked into the graph (an emulated replay recomputes it), and a host
synchronisation or a pageable host-to-device copy inside the capture (CUDA refuses them; allocations
are served from the graph's private memory pool) -- the static step's trace under ``torch._dynamo``
with ``fullgraph=True`` (``tests/test_static_decode.py``) checks for host synchronisation.
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
