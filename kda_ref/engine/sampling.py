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


def apply_penalties(logits: torch.Tensor, params, prompt_ids: list[int], output_ids: list[int]) -> torch.Tensor:
    """``logits [vocab]`` with the request's penalties, as vLLM's ``apply_penalties``
    (``vllm/model_executor/layers/utils.py``, commit ``9c9de631``) applies them: the repetition penalty to
    every token seen in the prompt or the output (a positive logit divided by it, another multiplied), then
    OpenAI's ``frequency_penalty x count`` and ``presence_penalty x (count > 0)`` over the output tokens."""
    V = logits.shape[-1]
    out = logits.clone()
    if params.repetition_penalty != 1.0:
        seen = torch.tensor(sorted({t for t in (*prompt_ids, *output_ids) if 0 <= t < V}), dtype=torch.long,
                            device=logits.device)
        v = out[seen]
        out[seen] = torch.where(v > 0, v / params.repetition_penalty, v * params.repetition_penalty)
    if output_ids and (params.frequency_penalty or params.presence_penalty):
        ids = torch.tensor([t for t in output_ids if 0 <= t < V], dtype=torch.long, device=logits.device)
        counts = torch.bincount(ids, minlength=V).to(out.dtype)
        out -= params.frequency_penalty * counts + params.presence_penalty * (counts > 0).to(out.dtype)
    return out


def filter_probs(probs: torch.Tensor, top_k: int, top_p: float, min_p: float) -> torch.Tensor:
    """``probs [vocab]`` with the tokens min_p, top_k and top_p drop set to 0 (vLLM's order: min_p, then top_k
    and top_p), renormalised. top_p keeps the most likely tokens until their mass reaches ``top_p`` (the
    token that crosses it included)."""
    keep = torch.ones_like(probs, dtype=torch.bool)
    if min_p > 0:
        keep &= probs >= min_p * probs.max()
    if top_k > 0:
        kth = torch.topk(probs, min(top_k, probs.numel())).values[-1]
        keep &= probs >= kth
    if top_p < 1.0:
        p = torch.where(keep, probs, torch.zeros_like(probs))
        order = torch.argsort(p, descending=True)
        before = torch.cumsum(p[order], 0) - p[order]  # mass of the more likely tokens
        kept = torch.zeros_like(keep)
        kept[order] = before < top_p * p.sum()
        keep &= kept
    out = torch.where(keep, probs, torch.zeros_like(probs))
    return out / out.sum()


def sample_token(logits: torch.Tensor, params, prompt_ids: list[int], output_ids: list[int],
                 generator: torch.Generator | None) -> int:
    """The next token of one request from its raw ``logits [vocab]``: penalties, then greedy or temperature,
    min_p, top_k, top_p and a draw with ``generator`` (vLLM's ``Sampler`` order, ``vllm/v1/sample/sampler.py``,
    commit ``3e342658``)."""
    check_finite(logits)
    x = apply_penalties(logits, params, prompt_ids, output_ids) if params.penalized else logits
    if params.temperature == 0:
        return int(torch.argmax(x))
    if not params.filtered:
        return sample(x, params.temperature, params.top_k, generator)
    probs = torch.softmax(x / params.temperature, dim=-1)
    if not bool(torch.isfinite(probs).all()):
        raise SamplingError(f"temperature {params.temperature!r} turns the logits into a non-finite distribution")
    return int(torch.multinomial(filter_probs(probs, params.top_k, params.top_p, params.min_p), 1, generator=generator))


def token_logprobs(logits: torch.Tensor, token: int, n: int) -> dict:
    """``{"token", "logprob", "rank", "top": [(id, logprob), ...]}`` of ``token`` under the model's own fp32
    log-softmax of ``logits [vocab]`` (before penalties and temperature: vLLM's default ``raw_logprobs``),
    with the ``n`` most likely tokens; ``rank`` 1 is the most likely."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    mine = lp[token]
    top = torch.topk(lp, min(n, lp.numel())) if n > 0 else None
    return {"token": int(token), "logprob": float(mine), "rank": int((lp > mine).sum()) + 1,
            "top": [] if top is None else [(int(i), float(v)) for v, i in zip(top.values, top.indices)]}


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


def wants_prompt_logprobs(item) -> bool:
    """Whether a scheduled item computes prompt tokens whose logprobs its request asked for (the runner
    then keeps the logits of every row of the chunk)."""
    return (item.req.params.prompt_logprobs is not None and not item.drafts
            and item.start < len(item.req.prompt_token_ids))


def record_prompt_logprobs(item, logits: torch.Tensor) -> None:
    """For an item of :func:`wants_prompt_logprobs`, ``logits [chunk, vocab]`` (row ``j`` at position
    ``start + j``) give the logprob of each next prompt token: stored by position on the request (a
    recomputation after a preemption writes the same values again)."""
    if not wants_prompt_logprobs(item):
        return
    req, prompt = item.req, item.req.prompt_token_ids
    for j in range(logits.shape[0]):
        pos = item.start + j + 1
        if pos < len(prompt):
            req.prompt_logprobs[pos] = token_logprobs(logits[j], prompt[pos], req.params.prompt_logprobs)
