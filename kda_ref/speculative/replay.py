"""ReplaySSM: recompute the state after the kept tokens from their inputs, instead of keeping a
state after every draft token.

The verify keeps each token's kernel inputs (:class:`~kda_ref.model.output.Trajectory`); :func:`replay` folds the
kept ones into the committed state with :func:`kda_ref.ops.recurrent_kda` (bit for bit a token-by-token run);
:func:`fold_kept` / :func:`fold_conv_kept` fold in fixed shapes after a static verify step. SGLang has it as an
option, off by default (``--enable-linear-replayssm-spec``; 0.5.23: ``commit_kda_replayssm_after_verify``, called
from ``python/sglang/srt/speculative/spec_utils.py::commit_mamba_states_after_verify``).
Design notes: ``docs/spec_decode.md#replayssm`` and ``docs/spec_decode.md#one-step``.
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


def fold_kept(state: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
              kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed-shape fold of ``N`` rows: ``state [N, H, K, V]``, the rows' ``L`` records (``k, g [N, L,
    H, K]``, ``v [N, L, H, V]``, ``beta [N, L, H]``) and ``kept [N]`` (int64, ``0 .. L``). Returns ``(the
    state after each row's first kept[n] records [N, H, K, V] -- the committed state where kept is 0,
    the states after every record [N, L, H, K, V])``; no host synchronisation, no data-dependent shape."""
    _, _, steps = recurrent_kda(k, k, v, g, beta, initial_state=state, return_step_states=True)
    after = torch.cat([state[:, None].to(steps.dtype), steps], dim=1)  # [N, 1 + L, ...]: after 0 .. L records
    return after[torch.arange(state.shape[0], device=state.device), kept], steps


def fold_conv_kept(window: torch.Tensor, x: torch.Tensor, kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fold_kept` for the short conv: ``window [N, D, W-1]``, the conv inputs ``x [N, L, D]``, ``kept
    [N]``. Returns ``(the window after each row's kept inputs [N, D, W-1], the windows after every input
    [N, L, D, W-1])``."""
    Wm1 = window.shape[-1]
    full = torch.cat([window.transpose(1, 2), x.to(window.dtype)], dim=1)  # [N, W-1 + L, D]
    rows = kept[:, None] + torch.arange(Wm1, device=x.device)  # [N, W-1]: the last W-1 inputs after kept
    final = full.gather(1, rows[:, :, None].expand(-1, -1, full.shape[-1])).transpose(1, 2)  # [N, D, W-1]
    return final, full.unfold(1, Wm1, 1)[:, 1:]  # unfold: [N, L + 1, D, W-1] windows after 0 .. L inputs
