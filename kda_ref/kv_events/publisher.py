"""The ZMQ publisher: each batch as ``[topic, seq, payload]`` on a PUB socket, the last ``buffer_steps`` batches
kept for a ROUTER socket that replays them on request (:mod:`.wire` says the frames).

vLLM's ``ZmqEventPublisher`` (``vllm/distributed/kv_events.py``) in the shape this server needs: a thread
owns the sockets; the engine's thread only offers batches (:meth:`ZmqPublisher.offer`), and a full queue
refuses one instead of stalling the step. The socket is an XPUB: batches are wanted
(:attr:`ZmqPublisher.wanted`) while a subscriber is connected or a replay client asked within a minute; once the
last one is gone no batch is taken (a later subscriber gets the changes since the last batch, which the cache's
journal keeps meanwhile).

Design notes: ``docs/serving.md#5b-kv-events-the-prefix-cache-on-vllms-wire-and-kda-ref-watch``.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time

import zmq

from .config import KVEventsConfig, is_bind_endpoint
from .wire import END_SEQ, encode_batch

log = logging.getLogger("uvicorn.error")
POLL_MS = 50
REPLAY_WANTED_S = 60.0  # a replay request keeps the batches wanted this long without a subscriber


def _bind(sock, endpoint: str) -> str:
    """Bind ``endpoint`` and return it as ``/kv_event_sources`` reports it: as configured (vLLM reports
    ``tcp://*:5557``, wildcard and all), except that a tcp port 0 becomes the port the system chose."""
    sock.bind(endpoint)
    if endpoint.startswith("tcp://") and endpoint.rsplit(":", 1)[1] == "0":
        port = sock.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1]
        return endpoint.rsplit(":", 1)[0] + ":" + port
    return endpoint


class ZmqPublisher:
    """Publishes batches for one engine (rank ``rank``) as ``config`` says; :meth:`close` stops it."""

    def __init__(self, config: KVEventsConfig, rank: int = 0):
        self.config, self.rank = config, rank
        self._queue: queue.Queue = queue.Queue(maxsize=config.max_queue_size)
        self._buffer: collections.deque = collections.deque(maxlen=config.buffer_steps)
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.XPUB)
        self._pub.setsockopt(zmq.SNDHWM, config.hwm)
        self._pub.setsockopt(zmq.LINGER, 0)
        if is_bind_endpoint(config.endpoint):
            self.endpoint = _bind(self._pub, config.endpoint)
        else:
            self._pub.connect(config.endpoint)
            self.endpoint = config.endpoint
        self._replay, self.replay_endpoint = None, None
        if config.replay_endpoint is not None:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self.replay_endpoint = _bind(self._replay, config.replay_endpoint)
        self._topics: set[bytes] = set()  # the topics subscribed to now (an XPUB tells the first and the last)
        self._replayed = float("-inf")  # when a replay client last asked (time.monotonic)
        self.sent = 0  # batches published (the next sequence number)
        self._topic = config.topic.encode()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kda-kv-events", daemon=True)
        self._thread.start()

    @property
    def wanted(self) -> bool:
        """Whether anyone reads the batches: a subscriber is connected, or a replay client asked within
        :data:`REPLAY_WANTED_S`. ``KVEventsObserver`` takes no batch otherwise (nobody would read it)."""
        return bool(self._topics) or time.monotonic() - self._replayed < REPLAY_WANTED_S

    def source(self) -> dict:
        """This publisher's configuration with the addresses it bound (``/kv_event_sources`` answers it)."""
        d = self.config.as_dict()
        d.update(endpoint=self.endpoint, replay_endpoint=self.replay_endpoint)
        return d

    def offer(self, events: list) -> bool:
        """Queue one batch of events (any thread); False when the queue is full (nothing was taken)."""
        try:
            self._queue.put_nowait(events)
            return True
        except queue.Full:
            return False

    def close(self) -> None:
        """Send what is queued (at most a second's wait), then close the sockets."""
        self._stop.set()
        self._thread.join(5)
        self._ctx.destroy(linger=0)

    # ---- the publisher's thread ---------------------------------------------------------------------
    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._pub, zmq.POLLIN)
        if self._replay is not None:
            poller.register(self._replay, zmq.POLLIN)
        while not (self._stop.is_set() and self._queue.empty()):
            ready = dict(poller.poll(0 if not self._queue.empty() else POLL_MS))
            if self._pub in ready:
                self._subscriptions()
            if self._replay is not None and self._replay in ready:
                self._answer_replay()
            self._send_queued()

    def _subscriptions(self) -> None:
        """An XPUB hands over a topic's first subscription (``\\x01`` + topic) and its last one's end (``\\x00``,
        also when that subscriber disconnects)."""
        while self._pub.poll(0):
            msg = self._pub.recv()
            if msg[:1] == b"\x01":
                self._topics.add(msg[1:])
            elif msg[:1] == b"\x00":
                self._topics.discard(msg[1:])

    def _send_queued(self) -> None:
        while True:
            try:
                events = self._queue.get_nowait()
            except queue.Empty:
                return
            payload = encode_batch(events, rank=self.rank)
            seq = self.sent.to_bytes(8, "big")
            try:
                self._pub.send_multipart((self._topic, seq, payload), flags=zmq.NOBLOCK)
            except zmq.Again:  # over the high-water mark: the subscriber finds the gap and replays it
                pass
            self._buffer.append((self.sent, payload))
            self.sent += 1

    def _answer_replay(self) -> None:
        frames = self._replay.recv_multipart()
        self._replayed = time.monotonic()
        if len(frames) != 3 or len(frames[2]) != 8:
            log.warning("KV events: a replay request of %d frames ignored (want an empty frame and 8 bytes)",
                        len(frames))
            return
        client, start = frames[0], int.from_bytes(frames[2], "big")
        for seq, payload in list(self._buffer):
            if seq >= start:
                self._replay.send_multipart((client, b"", self._topic, seq.to_bytes(8, "big"), payload))
        self._replay.send_multipart((client, b"", b"", END_SEQ, b""))
