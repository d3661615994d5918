"""``TextStream``: one request's output as text, sent as it grows, cut at the first stop string.

The engine stops on token ids (``stop_token_ids``, EOS); OpenAI's ``stop`` is strings, so they are found in
the detokenised text here, as vLLM's output processor does (``vllm/v1/engine/detokenizer.py``,
``check_stop_strings``): the text is cut before the stop string and the request is aborted at the next step
(its tokens past the stop were computed and are dropped). Two things are held back from a streamed delta
until the next tokens settle them: a trailing U+FFFD (the byte tokenizer's unfinished UTF-8 character: a
Chinese character arrives as three byte tokens) and the last ``len(longest stop) - 1`` characters (they may
be the start of a stop string). The deltas of a request always add up to its final text.
"""

from __future__ import annotations


class TextStream:
    """Detokenises ``ids`` as :meth:`add` hands them in; ``stop``: the stop strings (may be empty)."""

    def __init__(self, tokenizer, stop: tuple[str, ...] = ()):
        self.tokenizer, self.stop = tokenizer, stop
        self.hold = max((len(s) for s in stop), default=1) - 1
        self.ids: list[int] = []
        self.sent = ""  # the text already handed out
        self.stopped_at: int | None = None  # output tokens kept when a stop string ended the request

    def _cut(self, text: str) -> tuple[int, int] | None:
        """``(start, end)`` of the earliest stop string in ``text`` (searching only past what was sent)."""
        start = max(0, len(self.sent) - self.hold)
        hits = [(i, i + len(s)) for s, i in ((s, text.find(s, start)) for s in self.stop) if i >= 0]
        return min(hits) if hits else None

    def add(self, ids: list[int]) -> str:
        """The new text these tokens settle (maybe ""); after a stop string, :attr:`stopped` is True and
        nothing more is added."""
        if self.stopped:
            return ""
        self.ids += ids
        text = self.tokenizer.decode(self.ids)
        cut = self._cut(text) if self.stop else None
        if cut is not None:
            self.stopped_at = self._tokens_through(cut[1])
            return self._send(text[:cut[0]])
        stable = text.rstrip("\ufffd")
        return self._send(stable[:max(len(self.sent), len(stable) - self.hold)])

    def _tokens_through(self, end: int) -> int:
        """The fewest output tokens whose text reaches character ``end`` (through the stop string)."""
        for n in range(1, len(self.ids) + 1):
            if len(self.tokenizer.decode(self.ids[:n]).rstrip("\ufffd")) >= end:
                return n
        return len(self.ids)

    def _send(self, text: str) -> str:
        if not text.startswith(self.sent):  # a tokenizer whose text of a prefix is not a prefix: send nothing
            return ""  # until finish() (the byte tokenizer's always is)
        delta, self.sent = text[len(self.sent):], text
        return delta

    def finish(self) -> str:
        """The rest of the text once the request ended (what was held back)."""
        if self.stopped:
            return ""
        text = self.tokenizer.decode(self.ids)
        delta = text[len(self.sent):] if text.startswith(self.sent) else ""
        self.sent = text if delta or text.startswith(self.sent) else self.sent
        return delta

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
