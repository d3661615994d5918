"""Which draft tokens the target model accepts, and the token that follows them: greedy at temperature 0
(exactly plain greedy decoding's tokens), rejection sampling otherwise (each emitted token distributed as
the target's; Leviathan et al. 2023). vLLM: ``vllm/v1/sample/rejection_sampler.py::RejectionSampler``.
Design notes: ``docs/spec_decode.md#acceptance``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AcceptResult:
    num_accepted: int  # j: draft tokens accepted (0..k)
    next_token: int  # the token after them (a correction at j < k, a bonus at j == k)

    def tokens(self, drafts: list[int]) -> list[int]:
        """The tokens this step appends: the accepted drafts, then the next token."""
        return [*drafts[:self.num_accepted], self.next_token]


def _probs(logits: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    scaled = logits.float() / temperature
    if top_k > 0:
        kth = torch.topk(scaled, min(top_k, scaled.numel())).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return torch.softmax(scaled, dim=-1)


def accept_greedy(logits: torch.Tensor, drafts: list[int]) -> AcceptResult:
    """``logits [1 + k, V]``; the longest prefix of ``drafts`` that greedy decoding would produce."""
    return accept_greedy_tokens(torch.argmax(logits, dim=-1).tolist(), drafts)


def accept_greedy_tokens(target: list[int], drafts: list[int]) -> AcceptResult:
    """:func:`accept_greedy` from the greedy tokens ``target [1 + k]`` (``target[i]``: the argmax after
    position ``i``), when the step computed them already."""
    j = 0
    while j < len(drafts) and drafts[j] == target[j]:
        j += 1
    return AcceptResult(j, target[j])


def accept_rejection(logits: torch.Tensor, drafts: list[int], temperature: float, top_k: int,
                     generator: torch.Generator | None) -> AcceptResult:
    """Rejection sampling against deterministic drafts (see the module docstring)."""
    for i, d in enumerate(drafts):
        p = _probs(logits[i], temperature, top_k)
        u = float(torch.rand((), generator=generator))
        if u < float(p[d]):
            continue
        residual = p.clone()
        residual[d] = 0.0
        if float(residual.sum()) <= 0:  # p was one-hot on d: cannot happen after a rejection, but be exact
            return AcceptResult(i, d)
        return AcceptResult(i, int(torch.multinomial(residual / residual.sum(), 1, generator=generator)))
    p = _probs(logits[len(drafts)], temperature, top_k)
    return AcceptResult(len(drafts), int(torch.multinomial(p, 1, generator=generator)))
