"""When a request stops: the token rules (:func:`token_stop_reason`, a pure function) and the text's
(:class:`IncrementalDetokenizer`). The scheduler applies both as it appends sampled tokens
(:meth:`~kda_ref.engine.scheduler.Scheduler.append_tokens`, ``finish_if_stopped``, ``cut_at_stop``).

A request stops at a stop token or an EOS id (unless ``ignore_eos``), at ``max_tokens``, or at the token that
completes a stop string in its text, which ends before the string. Counterparts: vLLM's ``check_stop``,
``vllm/v1/engine/detokenizer.py::BaseIncrementalDetokenizer.update`` (``check_stop_strings``).
Design notes: ``docs/architecture.md#stopping``.
"""

from __future__ import annotations

import bisect

from .request import SamplingParams


def is_stop_token(params: SamplingParams, token: int, eos_token_ids: tuple[int, ...]) -> bool:
    """Whether ``token`` stops a request with ``params`` by its id: a stop token, or one of the model's EOS
    ids unless ignored. Such a token stays in the output's ids and is left out of its text, as vLLM's
    detokenizer leaves it out (``BaseIncrementalDetokenizer.update`` with ``stop_terminated``, unless
    ``include_stop_str_in_output``)."""
    return token in params.stop_token_ids or (not params.ignore_eos and token in eos_token_ids)


def text_ids(params: SamplingParams, tokens: list[int], eos_token_ids: tuple[int, ...]) -> list[int]:
    """The ids of ``tokens`` (new output tokens, nothing past the one that stops the request) whose text is
    shown: all of them, less a last one that stops the request by its id (:func:`is_stop_token`)."""
    return tokens[:-1] if tokens and is_stop_token(params, tokens[-1], eos_token_ids) else tokens


def token_stop_reason(params: SamplingParams, token: int, eos_token_ids: tuple[int, ...],
                      generated: int) -> str | None:
    """Why a request with ``params`` stops after ``token``, its ``generated``-th output token: ``"stop"``
    (:func:`is_stop_token`), ``"length"`` (``max_tokens`` reached), or None. The token rules alone (stop
    strings: :class:`IncrementalDetokenizer`); a disaggregated prefill asks it of the first token
    (:mod:`kda_ref.disagg`)."""
    if is_stop_token(params, token, eos_token_ids):
        return "stop"
    return "length" if generated >= params.max_tokens else None


class IncrementalDetokenizer:
    """Detokenises the ids :meth:`add` hands in; ``stop``: the stop strings (may be empty)."""

    def __init__(self, tokenizer, stop: tuple[str, ...] = ()):
        self.tokenizer, self.stop = tokenizer, tuple(stop)
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.ids: list[int] = []
        self.settled = ""  # the text of every token so far, up to the last finished character
        self._shown = ""  # what may be shown now: settled, less what could still start a stop string
        self._waiting: list[int] = []  # ids taken but not decoded yet (no stop strings: decoded when read)
        self._prefix, self._read = 0, 0  # token offsets: context start, end of the settled tokens
        self._ends: list[int] = []  # len(settled) after token n (one entry per token)
        self.stopped_at: int | None = None  # tokens through the stop string's end, once one was found

    def _push(self, token: int) -> None:
        """Add one token; settle the text its window now decodes to (the standard incremental scheme)."""
        self.ids.append(token)
        before = self.tokenizer.decode(self.ids[self._prefix:self._read])
        now = self.tokenizer.decode(self.ids[self._prefix:])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            self.settled += now[len(before):]
            self._prefix, self._read = self._read, len(self.ids)
        self._ends.append(len(self.settled))

    def _cut(self) -> tuple[int, int] | None:
        """``(start, end)`` of the earliest stop string in the settled text (searching past what was shown)."""
        start = max(0, len(self._shown) - self.hold)
        hits = [(i, i + len(s)) for s, i in ((s, self.settled.find(s, start)) for s in self.stop) if i >= 0]
        return min(hits) if hits else None

    def add(self, ids: list[int]) -> bool:
        """Take ``ids``; whether a stop string ended the text (then :attr:`stopped` stays True and nothing
        more is taken). Without stop strings nothing is decoded until the text is read (:attr:`text`,
        :meth:`finish`): an offline request pays for its text once, a streamed one each step it is sent."""
        if self.stopped:
            return True
        if not self.stop:
            self._waiting += ids
            return False
        return self._take(ids)

    @property
    def text(self) -> str:
        """What may be shown now: the settled text, less what could still start a stop string."""
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            self._take(waiting)
        return self._shown

    def _take(self, ids: list[int]) -> bool:
        for token in ids:
            self._push(token)
            cut = self._cut() if self.stop else None
            if cut is not None:
                self.stopped_at = bisect.bisect_left(self._ends, cut[1]) + 1  # the fewest tokens through it
                self._shown = self.settled[:cut[0]]
                return True
        self._shown = self.settled[:max(len(self._shown), len(self.settled) - self.hold)]
        return False

    def finish(self) -> str:
        """The whole text once the request ended: what was held back too, an unfinished character
        included as the full decode shows it (the text before the stop string after a stop)."""
        shown = self.text  # decodes what waits
        if not self.stopped:
            before = self.tokenizer.decode(self.ids[self._prefix:self._read])
            self.settled += self.tokenizer.decode(self.ids[self._prefix:])[len(before):]
            self._prefix = self._read = len(self.ids)
            shown = self._shown = self.settled
        return shown

    @property
    def stopped(self) -> bool:
        return self.stopped_at is not None

    # ---- a speculative step asks before it commits ----------------------------------------------------
    def mark(self) -> tuple:
        """Where the text stands now, for :meth:`rewind` (constant size: offsets, not copies)."""
        shown = len(self.text)  # decodes what waits first (with stop strings nothing ever waits)
        return (len(self.ids), len(self.settled), shown, self._prefix, self._read, self.stopped_at)

    def rewind(self, mark: tuple) -> None:
        """Back to :meth:`mark`'s point, as if the tokens added since were never seen."""
        n_ids, n_settled, n_text, self._prefix, self._read, self.stopped_at = mark
        del self.ids[n_ids:], self._ends[n_ids:]
        self.settled, self._shown = self.settled[:n_settled], self.settled[:n_text]

    def tokens_until_stop(self, ids: list[int]) -> int | None:
        """How many of ``ids`` the request keeps if a stop string ends it among them (None: none does);
        nothing changes. 0 once the text already stopped."""
        if not self.stop:
            return None
        if self.stopped:
            return 0
        mark = self.mark()
        try:
            for m, token in enumerate(ids, start=1):
                if self.add([token]):
                    return m
            return None
        finally:
            self.rewind(mark)
