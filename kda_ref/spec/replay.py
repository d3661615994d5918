"""ReplaySSM: recompute the state after the kept tokens from their inputs, instead of keeping a
state after every draft token.

The verify forward computes outputs from the committed state without writing any state; each
verified token leaves its kernel inputs behind (:class:`~kda_ref.model.output.Trajectory`: the
short conv's input row and ``k, v, g, beta`` -- a few KiB per token where a state is
``H x K x V``). Once acceptance is known, :func:`replay` folds the kept tokens into the committed
state with the same recurrent kernel the engine decodes with, so the result is exactly the state a
token-by-token run would have produced (tested bit for bit). SGLang's ReplaySSM
(``fused_recurrent_linear_replayssm_decode`` in ``TritonKDAKernel.packed_decode``) keeps such a ring
of per-token records per slot and folds it into the checkpoint; vLLM's ``_postprocess_replayssm_kernel``
(``vllm/model_executor/layers/mamba/ops/ssu_dispatch.py``) moves the ring cursors after acceptance.
Here the fold happens right after each verify (no ring carried across steps).

A tree of drafts cannot be served this way without replaying every branch: the inputs of a token
depend on its own prefix, so each candidate path would need its own trajectory and its own fold.
"""

from __future__ import annotations

import torch

from ..model.kda_layer import conv_windows
from ..ops import recurrent_kda


def replay(state: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
           all_steps: bool = False) -> torch.Tensor:
    """Fold ``L`` tokens into ``state [H, K, V]`` (``k, g [L, H, K]``, ``v [L, H, V]``, ``beta [L, H]``).

    Returns the state after the last token, or with ``all_steps`` the state after every token
    ``[L, H, K, V]``. The output ``o`` of the recurrence is not needed, so ``q`` is a stand-in."""
    args = [t[None] for t in (k, k, v, g, beta)]  # [L, ...] -> [1, L, ...]
    _, final, steps = recurrent_kda(*args, initial_state=state[None], output_final_state=True,
                                    return_step_states=True)
    return steps[0] if all_steps else final[0]


def replay_conv(window: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The conv windows after each of ``L`` inputs ``x [L, D]`` appended to ``window [D, W-1]``:
    ``[L, D, W-1]`` -- the KDA layer's own bookkeeping (:func:`kda_ref.model.kda_layer.conv_windows`)
    at boundaries 1..L."""
    return conv_windows(window, x, torch.arange(1, x.shape[0] + 1, device=x.device))
