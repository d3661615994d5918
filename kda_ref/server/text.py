"""``TextStream``: one request's output as text, sent as it grows, cut at the first stop string.

The engine stops on token ids (``stop_token_ids``, EOS); OpenAI's ``stop`` is strings, so they are found in
the detokenised text here, as vLLM's detokenizer does (``vllm/v1/engine/detokenizer.py``,
``BaseIncrementalDetokenizer.update`` calling ``check_stop_strings``): the text is cut before the stop
string and the request is aborted at the next step (its tokens past the stop were computed and are
dropped).

Detokenising is incremental, as vLLM's and Hugging Face's streamers do it: each new token decodes only a
short window (the tokens since the last settled character, with a few before it for context), so a
request's text costs time proportional to its length, not to its square. Two things are held back from a
streamed delta until the next tokens settle them: an unfinished character (the byte tokenizer's Chinese
character arrives as three byte tokens: U+FFFD until the third) and the last ``len(longest stop) - 1``
characters (they may be the start of a stop string). The deltas of a request always add up to its final
text.
"""

from __future__ import annotations

import bisect


class TextStream:
    """Detokenises ``ids`` as :meth:`add` hands them in; ``stop``: the stop strings (may be empty)."""

    def __init__(self, tokenizer, stop: tuple[str, ...] = ()):
        self.tokenizer, self.stop = tokenizer, stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.ids: list[int] = []
        self.settled = ""  # the text of every token so far, up to the last finished character
        self.sent = ""  # the part of it already handed out
        self._prefix, self._read = 0, 0  # token offsets: context start, end of the settled tokens
        self._ends: list[int] = []  # len(settled) after token n (one entry per token)
        self.stopped_at: int | None = None  # output tokens kept when a stop string ended the request

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
        """``(start, end)`` of the earliest stop string in the settled text (searching past what was sent)."""
        start = max(0, len(self.sent) - self.hold)
        hits = [(i, i + len(s)) for s, i in ((s, self.settled.find(s, start)) for s in self.stop) if i >= 0]
        return min(hits) if hits else None

    def add(self, ids: list[int]) -> str:
        """The new text these tokens settle (maybe ""); after a stop string, :attr:`stopped` is True and
        nothing more is added."""
        if self.stopped:
            return ""
        for token in ids:
            self._push(token)
        cut = self._cut() if self.stop else None
        if cut is not None:
            self.stopped_at = bisect.bisect_left(self._ends, cut[1]) + 1  # the fewest tokens through the stop
            return self._send(self.settled[:cut[0]])
        return self._send(self.settled[:max(len(self.sent), len(self.settled) - self.hold)])

    def _send(self, text: str) -> str:
        delta, self.sent = text[len(self.sent):], text
        return delta

    def finish(self) -> str:
        """The rest of the text once the request ended (what was held back, an unfinished character
        included, as the full decode shows it)."""
        if self.stopped:
            return ""
        before = self.tokenizer.decode(self.ids[self._prefix:self._read])
        self.settled += self.tokenizer.decode(self.ids[self._prefix:])[len(before):]
        return self._send(self.settled)

    @property
    def stopped(self) -> bool:
        return self.stopped_at is not None

    @property
    def text(self) -> str:
        return self.sent

    @property
    def token_ids(self) -> list[int]:
        """The output tokens the answer keeps (those up to the stop string's end, after a stop)."""
        return self.ids if self.stopped_at is None else self.ids[:self.stopped_at]
