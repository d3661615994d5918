"""The watcher's socket side: a SUB socket per publisher (rank), replay of what it missed, captures.

A late start or a gap in a rank's sequence numbers is replayed from its replay socket, what the publisher
no longer buffers is counted ``lost``, and a batch numbered 0 after others (a restarted publisher) drops
what the forest held of that rank. ``--record FILE`` writes a JSON-lines capture; :func:`read_capture`
gives it back in order, so a capture replays through the same code as a live server.

Design notes (the capture format):
``docs/serving.md#5b-kv-events-the-prefix-cache-on-vllms-wire-and-kda-ref-watch``.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass

import zmq

from .forest import Forest
from .wire import END_SEQ, WireError, decode_payload

CAPTURE_VERSION = 1
REPLAY_TIMEOUT_MS = 2000


@dataclass
class Source:
    """One publisher (a rank): its PUB endpoint, its replay endpoint (or None) and its topic."""

    rank: int
    endpoint: str
    replay: str | None = None
    topic: str = ""


class Capture:
    """A ``--record`` file being written (module docstring)."""

    def __init__(self, path, header: dict):
        self._f = open(path, "w", encoding="utf-8")  # noqa: SIM115 -- closed by close()
        self.write({"kda_watch_capture": CAPTURE_VERSION, **header})

    def write(self, obj: dict) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._f.flush()

    def message(self, rank: int, frames, replayed: bool) -> None:
        self.write({"t": time.time(), "rank": rank, "replayed": replayed,
                    "frames": [base64.b64encode(f).decode() for f in frames]})

    def close(self) -> None:
        self._f.close()


def read_capture(path) -> tuple[dict, list[dict]]:
    """``(header, entries)`` of a capture; a file that is not one is a ``ValueError`` naming the line."""
    with open(path, encoding="utf-8") as f:
        lines = [ln for ln in f if ln.strip()]
    if not lines:
        raise ValueError(f"{path}: empty, not a kda-ref watch capture")
    try:
        header, entries = json.loads(lines[0]), [json.loads(ln) for ln in lines[1:]]
    except ValueError as e:
        raise ValueError(f"{path}: not JSON lines ({e})") from None
    if not isinstance(header, dict) or header.get("kda_watch_capture") != CAPTURE_VERSION:
        raise ValueError(f"{path}: line 1 is not a kda-ref watch capture header")
    for e in entries:
        if "frames" in e:
            e["frames"] = [base64.b64decode(x) for x in e["frames"]]
    return header, entries


class Subscriber:
    """Feeds ``forest`` from ``sources`` (module docstring). ``report(line)`` hears what went wrong (a
    decode error, a lost batch), one line each; the watch goes on with what it has."""

    def __init__(self, sources: list[Source], forest: Forest, capture: Capture | None = None, report=print,
                 hwm: int = 100_000):
        self.sources, self.forest, self.capture, self.report, self.hwm = sources, forest, capture, report, hwm
        self._ctx = zmq.Context()
        self._subs: dict = {}
        self.expected: dict[int, int | None] = {s.rank: None for s in sources}

    def connect(self) -> "Subscriber":
        """Open a SUB socket on every source, then replay from each rank's replay socket what it published
        before (a capture is read without sockets: :meth:`handle`)."""
        for s in self.sources:
            sock = self._ctx.socket(zmq.SUB)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, self.hwm)  # past it ZMQ drops: the gap is found and replayed
            sock.setsockopt(zmq.SUBSCRIBE, s.topic.encode())
            try:
                sock.connect(s.endpoint)
            except zmq.ZMQError as e:  # an address ZMQ cannot use: said, and that rank is left out
                self.report(f"rank {s.rank}: cannot subscribe to {s.endpoint!r} ({e})")
                sock.close()
                continue
            self._subs[sock] = s
        for s in self.sources:  # what was published before we came: a quiet server sends nothing new to
            if s.replay:  # reveal a gap, so ask at once
                for seq, frames in self._replay(s, 0):
                    if seq >= (self.expected[s.rank] or 0):
                        if self.expected[s.rank] is None and seq > 0:
                            self._lost(s, 0, seq)
                        self._apply(s, seq, frames[2], True)
                        self._record(s, frames, True)
        return self

    def pump(self, timeout_s: float) -> int:
        """Handle what arrives within ``timeout_s`` seconds; returns the messages handled."""
        poller, n = zmq.Poller(), 0
        for sock in self._subs:
            poller.register(sock, zmq.POLLIN)
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            for sock, _ in poller.poll(max(1, int(left * 1000))):
                frames = sock.recv_multipart()
                self.handle(self._subs[sock], frames)
                n += 1
        return n

    def handle(self, src: Source, frames, replayed: bool = False) -> None:
        """One message of ``src`` (live, or from a capture): order it by its sequence number."""
        if len(frames) != 3 or len(frames[1]) != 8:
            self.report(f"rank {src.rank}: a message of {len(frames)} frames is not [topic, seq, payload]: skipped")
            return
        seq, want = int.from_bytes(frames[1], "big"), self.expected[src.rank]
        if want is not None and seq < want and (seq != 0 or replayed):
            return  # already applied (a replay overlapping the live stream)
        if want is not None and seq < want:
            self.report(f"rank {src.rank}: the publisher restarted (sequence back to 0): its blocks are dropped")
            self.forest.reset(src.rank)
        elif seq > (want or 0):
            if replayed:  # a capture's replay that began past what it lacked: that much was lost then
                self._lost(src, want or 0, seq)
            else:
                self._catch_up(src, want or 0, seq)
            if seq < (self.expected[src.rank] or 0):
                self._record(src, frames, replayed)
                return
        self._apply(src, seq, frames[2], replayed)
        self._record(src, frames, replayed)

    def _record(self, src: Source, frames, replayed: bool) -> None:
        if self.capture is not None:
            self.capture.message(src.rank, frames, replayed)

    def _lost(self, src: Source, first: int, upto: int) -> None:
        if upto > first:
            self.forest.counts.lost += upto - first
            self.report(f"rank {src.rank}: {upto - first} batch(es) from seq {first} lost"
                        + ("" if src.replay else " (no replay endpoint)"))

    def _apply(self, src: Source, seq: int, payload: bytes, replayed: bool) -> None:
        self.expected[src.rank] = seq + 1
        try:
            batch = decode_payload(payload)
        except WireError as e:
            self.forest.counts.decode_errors += 1
            self.report(f"rank {src.rank} seq {seq}: cannot decode the batch ({e}): skipped")
            return
        batch.rank = src.rank if batch.rank is None else batch.rank
        self.forest.apply(batch, replayed=replayed)

    def _catch_up(self, src: Source, first: int, upto: int) -> None:
        """Batches ``first .. upto - 1`` were missed: replay them if the rank can (each recorded before the
        live message that revealed the gap), else count them lost."""
        got = self._replay(src, first) if src.replay else []
        got = [(seq, frames) for seq, frames in got if seq >= first]
        self._lost(src, first, got[0][0] if got else upto)
        for seq, frames in got:
            if seq >= (self.expected[src.rank] or 0):
                self._apply(src, seq, frames[2], True)
                self._record(src, frames, True)

    def _replay(self, src: Source, start: int) -> list[tuple[int, list]]:
        """Ask ``src``'s replay socket for every batch from ``start``: ``[(seq, frames)]`` up to its end
        marker (a DEALER: an empty delimiter frame, then the 8-byte start). Servers before the topic frame
        was added answer ``[seq, payload]`` and end with ``[END_SEQ, b""]``; both are read."""
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        out = []
        try:
            sock.connect(src.replay)
            sock.send_multipart([b"", start.to_bytes(8, "big")])
            while sock.poll(REPLAY_TIMEOUT_MS):
                frames = sock.recv_multipart()[1:]  # the delimiter first
                if len(frames) == 2:  # older vLLM / SGLang: [seq, payload], no topic
                    frames = [b"", *frames]
                if len(frames) == 3 and frames[1] == END_SEQ:
                    return out
                if len(frames) == 3 and len(frames[1]) == 8:
                    out.append((int.from_bytes(frames[1], "big"), frames))
            self.report(f"rank {src.rank}: the replay endpoint {src.replay} did not answer within "
                        f"{REPLAY_TIMEOUT_MS / 1000:g} s")
        except zmq.ZMQError as e:
            self.report(f"rank {src.rank}: cannot ask {src.replay!r} for a replay ({e})")
        finally:
            sock.close()
        return out

    def close(self) -> None:
        self._ctx.destroy(linger=0)
        if self.capture is not None:
            self.capture.close()
