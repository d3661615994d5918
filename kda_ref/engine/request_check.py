"""``RequestChecker``: every check of a request before anything is queued -- one place for all of them.

A bad request raises :class:`~kda_ref.engine.RequestError` naming the argument: wrong types of parameters or
prompt, a prompt that cannot be encoded or is empty, a token outside the vocabulary, prompt + ``max_tokens``
past ``max_model_len``, a peak past the memory budget (:mod:`kda_ref.engine.demand`). Used by
``LLM.check_request``, and, built from the configurations alone (:func:`kda_ref.engine.demand.config_demand`),
by the process mode of disaggregation. Counterparts: vLLM's ``InputProcessor``, SGLang's ``TokenizerManager``.
Design notes: ``docs/architecture.md#request-checks``.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..model import ModelConfig
from .request import RequestError, SamplingParams

_NOT_FOUND = object()  # ``next``'s default: a ``None`` in a prompt is a bad id too, not "none found"


def _first_non_int(ids):
    """The first id that is not an int (a bool is not a token id, nor is ``None``), else ``_NOT_FOUND``."""
    return next((t for t in ids if isinstance(t, bool) or not isinstance(t, int)), _NOT_FOUND)


# the sampler options a speculative engine refuses, at their neutral values (the first one set is named)
_NEUTRAL_SAMPLING = {"top_p": 1.0, "min_p": 0.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                     "repetition_penalty": 1.0}


class RequestChecker:
    """The checks of the module docstring for one engine. ``demand(num_tokens)`` sizes a request's peak
    (a :class:`~kda_ref.engine.demand.RequestDemand`) against ``budget_bytes``; without it the budget is
    not checked. ``tokenizer``: the object that encodes text prompts, or ``None`` with
    ``tokenizer_note`` saying why; ``tokenizer_known=False`` while the tokenizer is still to be told
    (:meth:`use_tokenizer`: the process mode learns its workers' engines' tokenizer when they start)."""

    def __init__(self, model_config: ModelConfig, max_model_len: int, tokenizer=None,
                 tokenizer_note: str | None = None, *, demand: Callable | None = None, budget_bytes: int = 0,
                 tokenizer_known: bool = True, speculative: bool = False, context_parallel: bool = False):
        self.config, self.max_model_len = model_config, max_model_len
        self.speculative, self.context_parallel = speculative, context_parallel
        self.tokenizer, self.tokenizer_note, self.tokenizer_known = tokenizer, tokenizer_note, tokenizer_known
        self.demand, self.budget_bytes = demand, budget_bytes

    @classmethod
    def for_engine(cls, model_config: ModelConfig, engine_config, max_model_len: int, chunk_size: int,
                   budget_bytes: int, tokenizer=None, tokenizer_note: str | None = None) -> "RequestChecker":
        """The checker of an engine built from ``engine_config`` (an :class:`~kda_ref.engine.EngineConfig`),
        made where that engine is not: every check :meth:`kda_ref.LLM.check_request` makes, the budget
        included (:func:`~kda_ref.engine.demand.config_demand`). ``kda-ref serve``'s HTTP process checks
        each request with it before the engine process sees it (vLLM's ``InputProcessor`` in the API
        server's process; SGLang's ``TokenizerManager``)."""
        from .demand import config_demand

        return cls(model_config, max_model_len, tokenizer, tokenizer_note,
                   demand=config_demand(model_config, engine_config, chunk_size), budget_bytes=budget_bytes,
                   speculative=engine_config.speculative is not None,
                   context_parallel=engine_config.parallel.context_parallel_size > 1)

    def use_tokenizer(self, tokenizer, note: str | None) -> None:
        """The engines' tokenizer, once known (``None`` with ``note`` saying why there is none)."""
        self.tokenizer, self.tokenizer_note, self.tokenizer_known = tokenizer, note, True

    def _encode_text(self, prompt: str) -> list[int]:
        if not prompt:
            raise RequestError("prompt: empty")
        if not self.tokenizer_known:
            raise RuntimeError("tokenizer: the engines' tokenizer is not known yet (the worker processes report "
                               "it when they start)")
        if self.tokenizer is None:
            raise RequestError(f"prompt: text needs this model's tokenizer, which is not available "
                               f"({self.tokenizer_note}); pass token ids instead")
        try:
            ids = list(self.tokenizer.encode(prompt))
        except UnicodeError as e:
            raise RequestError(f"prompt: the text cannot be encoded ({e.reason} at {e.start})") from None
        bad = _first_non_int(ids)
        if bad is not _NOT_FOUND:  # never truncated or coerced
            raise RequestError(f"tokenizer: encode() must return int token ids, got {type(bad).__name__} {bad!r}")
        bos = self.config.bos_token_id  # text gets the model's BOS first, as a tokenizer would add it
        return ([bos] if bos is not None and bos < self.config.vocab_size else []) + ids

    def encode(self, prompt) -> tuple[list[int], str | None]:
        """``(token ids, the text or None)`` of a prompt as the engine runs it."""
        if isinstance(prompt, str):
            return self._encode_text(prompt), prompt
        if isinstance(prompt, torch.Tensor):
            if prompt.dim() != 1 or prompt.dtype.is_floating_point or prompt.dtype == torch.bool or prompt.is_complex():
                raise RequestError(f"prompt: a tensor prompt must be 1-D integer token ids, got "
                                   f"{prompt.dtype} of shape {tuple(prompt.shape)}")
            prompt = prompt.tolist()
        if not isinstance(prompt, (list, tuple)):
            raise RequestError(f"prompt: must be a str or a list of int token ids, got {type(prompt).__name__}")
        bad = _first_non_int(prompt)
        if bad is not _NOT_FOUND:
            raise RequestError(f"prompt: token ids must be ints, got {type(bad).__name__} {bad!r}")
        return list(prompt), None

    def _check_features(self, params: SamplingParams) -> None:
        """The sampler features this engine cannot honour: a verify accepts drafts against the target's own
        distribution (no penalties, no top_p / min_p filter), and a context-parallel prefill returns the
        last position's logits only (no prompt logprobs)."""
        if self.speculative and (params.penalized or params.filtered):
            name = next(n for n, neutral in _NEUTRAL_SAMPLING.items() if getattr(params, n) != neutral)
            raise RequestError(f"{name}: not supported with speculative decoding (drafts are verified against the "
                               f"target's unfiltered, unpenalised distribution; top_p, min_p and the penalties "
                               f"must stay at their neutral values)")
        if self.context_parallel and params.prompt_logprobs is not None:
            raise RequestError("prompt_logprobs: not supported with context-parallel prefill (the ranks return the "
                               "last position's logits only)")
        if params.stop and self.tokenizer_known and self.tokenizer is None:
            raise RequestError(f"stop: stop strings are found in the output's text, and this engine has no "
                               f"tokenizer ({self.tokenizer_note or 'none was given'}); use stop_token_ids")

    def _check_room(self, prompt, params: SamplingParams) -> None:
        """The length check before any encoding: ``max_tokens`` alone filling ``max_model_len``, or a text
        longer than the room left could hold at the tokenizer's most characters per token
        (``tokenizer.max_token_chars``: 1 for the byte tokenizer) -- a megabyte of text is refused without
        being tokenised. The exact count is checked after encoding, by the same message."""
        room = self.max_model_len - params.max_tokens
        if room < 1:  # max_tokens alone fills the model's length: that field is at fault, whatever the prompt
            raise RequestError(f"max_tokens: {params.max_tokens} leaves no room for a prompt in the context limit "
                               f"max_model_len={self.max_model_len}")
        per = getattr(self.tokenizer, "max_token_chars", None)
        if isinstance(prompt, str) and isinstance(per, int) and per > 0 and len(prompt) > room * per:
            raise RequestError(f"prompt: at least {-(-len(prompt) // per)} prompt tokens + max_tokens "
                               f"{params.max_tokens} exceed the context limit max_model_len={self.max_model_len}")

    def longest_output(self, prompt_len: int) -> int:
        """The most tokens a request of ``prompt_len`` prompt tokens may ask for: the rest of ``max_model_len``
        (vLLM's ``get_max_tokens`` when a chat sets no ``max_tokens``), less what the memory budget could not
        hold at the request's peak (the demand grows with its length: a bisection). At least 1 (a request
        that cannot fit even so is refused by :meth:`check_request`)."""
        lo, hi = 1, max(1, self.max_model_len - prompt_len)
        if self.demand is None or self.demand(prompt_len + hi).bytes <= self.budget_bytes:
            return hi
        while hi - lo > 1:  # hi's peak does not fit; lo's does (or lo is 1)
            mid = (lo + hi) // 2
            if self.demand(prompt_len + mid).bytes <= self.budget_bytes:
                lo = mid
            else:
                hi = mid
        return lo

    def check_request(self, prompt, params) -> tuple[list[int], str | None, SamplingParams]:
        """``(token ids, the text or None, the sampling parameters)``, or the :class:`RequestError`."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise RequestError(f"params: expected SamplingParams, got {type(params).__name__}")
        self._check_features(params)
        self._check_room(prompt, params)
        ids, text = self.encode(prompt)
        V = self.config.vocab_size
        if not ids:
            raise RequestError("prompt: empty")
        bad = [t for t in ids if not 0 <= t < V]
        if bad:
            raise RequestError(f"prompt: token id {bad[0]} is outside the vocabulary [0, {V})")
        if len(ids) + params.max_tokens > self.max_model_len:
            raise RequestError(f"prompt: {len(ids)} prompt tokens + max_tokens {params.max_tokens} exceed the "
                               f"context limit max_model_len={self.max_model_len}")
        need = self.demand(len(ids) + params.max_tokens) if self.demand is not None else None
        if need is not None and need.bytes > self.budget_bytes:  # its peak: slots, pinned checkpoints, pages
            raise RequestError(f"prompt: this request needs {need.describe()} at its peak, more than the whole "
                               f"memory budget ({self.budget_bytes} B)")
        return ids, text, params
