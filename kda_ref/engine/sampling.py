"""Sampling of the next token from a step's logits: greedy for a whole batch at once, or softmax sampling
per request, and the finiteness checks that turn bad logits into a :class:`SamplingError` on that
request alone (:mod:`kda_ref.engine.recovery`). The runner (:mod:`kda_ref.engine.runner`) calls them."""

from __future__ import annotations

import torch


class SamplingError(ValueError):
    """The logits or the distribution of one request cannot be sampled (NaN / inf)."""


class GreedyRows:
    """Greedy sampling of every row of ``logits [N, vocab]`` at once: one ``argmax`` and one finiteness
    check for the whole batch instead of a few small ops and host reads per request (vLLM's
    ``Sampler.greedy_sample`` in ``vllm/v1/sample/sampler.py``, commit ``00ec9781``, is the same one
    ``argmax(dim=-1)`` over the batch; vLLM has no per-row finiteness check there). :meth:`token` gives
    row ``n``'s token exactly as :func:`sample` with temperature 0 would, and raises the same
    :class:`SamplingError` for a row with a NaN or infinite logit. ``pre``: the two reductions' results
    ``[tokens, finite flags]`` when the step computed them (a static step does, inside its graph)."""

    def __init__(self, logits: torch.Tensor, pre: list[list[int]] | None = None):
        self._logits = logits
        if pre is not None:
            self._tokens, self._finite = pre
        else:
            self._finite = torch.isfinite(logits).all(dim=-1).tolist()  # [N]
            self._tokens = torch.argmax(logits, dim=-1).tolist()  # [N]

    def token(self, n: int) -> int:
        if not self._finite[n]:
            check_finite(self._logits[n])  # raises, naming how many logits are bad
        return self._tokens[n]


def check_finite(logits: torch.Tensor) -> None:
    """:class:`SamplingError` if any logit is NaN or infinite."""
    if not bool(torch.isfinite(logits).all()):
        bad = int((~torch.isfinite(logits)).sum())
        raise SamplingError(f"{bad} of {logits.numel()} logits are not finite (NaN or inf)")


def sample(logits: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator | None) -> int:
    """Greedy when ``temperature == 0``, else softmax sampling (optionally top-k) with ``generator``.

    Non-finite logits raise :class:`SamplingError` instead of returning an arbitrary token (``argmax``
    of a NaN row is index 0; ``multinomial`` of NaN probabilities raises deep inside torch)."""
    check_finite(logits)
    if temperature == 0:
        return int(torch.argmax(logits))
    scaled = logits / temperature
    if top_k > 0:
        kth = torch.topk(scaled, min(top_k, scaled.numel())).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if not bool(torch.isfinite(probs).all()):
        raise SamplingError(f"temperature {temperature!r} turns the logits into a non-finite distribution")
    return int(torch.multinomial(probs, 1, generator=generator))
