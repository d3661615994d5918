"""Drive a running vLLM server (scripts/vllm_tiny_server.py) and record the KV events it publishes.

    .vllm-venv/bin/python scripts/vllm_kv_capture.py [--url http://127.0.0.1:8011]
        [--kv tcp://127.0.0.1:5611] [--replay tcp://127.0.0.1:5612] [--out tests/fixtures/vllm_0.32_kv_events.jsonl]

The server should run with a small KV cache (``--num-blocks 24``: 23 usable blocks of 32 tokens) and
``--dev-mode`` (``POST /reset_prefix_cache``). The scenario: two prompts sharing a 4-block prefix, the
first again (a hit), a prompt given as token ids, eight distinct 6-block prompts (evictions:
``BlockRemoved``), then ``/reset_prefix_cache`` (``AllBlocksCleared``), one more prompt, and a replay
from sequence 0 on the ROUTER socket. Every message is written as ``{"t", "frames": [base64...],
"replayed"}``, one JSON object a line (replayed ones without the DEALER's empty first frame, so every
line's frames are ``[topic, seq, payload]``; the replay's end is ``[b"", -1 as 8 signed bytes, b""]``); a summary of what was seen goes to stdout as JSON.
Needs pyzmq and msgspec only (either venv).
"""

from __future__ import annotations

import argparse
import base64
import json
import time
import urllib.request

import msgspec
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)
PREFIX = ("The quick brown fox jumps over the lazy dog while the KV cache keeps every block of the shared "
          "prefix; vLLM hashes each full block of thirty-two tokens.")  # 151 tokens with <bos>


def post(url: str, path: str, body: dict | None) -> dict:
    data = json.dumps(body or {}).encode()
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        raw = r.read()
    return json.loads(raw) if raw else {}


def complete(url: str, prompt, max_tokens: int) -> dict:
    return post(url, "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens,
                                         "temperature": 0, "ignore_eos": True})


def drain(sub: zmq.Socket, out: list, quiet_ms: int = 400) -> None:
    while sub.poll(quiet_ms):
        out.append((time.time(), sub.recv_multipart(), False))


def metrics(url: str) -> dict:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    keep = ("vllm:num_requests_running", "vllm:num_requests_waiting{", "vllm:kv_cache_usage_perc",
            "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(keep)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8011")
    ap.add_argument("--kv", default="tcp://127.0.0.1:5611")
    ap.add_argument("--replay", default="tcp://127.0.0.1:5612")
    ap.add_argument("--out", default=None)
    ap.add_argument("--distinct", type=int, default=8)
    a = ap.parse_args(argv)

    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(a.kv)
    time.sleep(1.0)  # the slow joiner: PUB drops what it sends before the subscription arrives
    msgs: list = []
    steps = []

    def step(name, fn):
        r = fn()
        drain(sub, msgs)
        steps.append({"step": name, "after_msg": len(msgs), "result": r})

    step("A", lambda: complete(a.url, PREFIX + " Alpha ends here.", 24)["usage"])
    step("B shares A's prefix", lambda: complete(a.url, PREFIX + " Beta differs.", 8)["usage"])
    step("A again", lambda: complete(a.url, PREFIX + " Alpha ends here.", 8)["usage"])
    step("token ids 0..99", lambda: complete(a.url, list(range(100)), 4)["usage"])
    for i in range(a.distinct):
        text = f"{i:03d} distinct prompt " * 12  # 6 full blocks each (12 * 20 bytes + <bos> = 241 tokens)
        step(f"distinct {i}", lambda text=text: complete(a.url, text, 4)["usage"])
    step("metrics", lambda: metrics(a.url))
    step("reset_prefix_cache", lambda: post(a.url, "/reset_prefix_cache", None))
    step("A after reset", lambda: complete(a.url, PREFIX + " Alpha ends here.", 4)["usage"])

    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(a.replay)
    dealer.send_multipart([b"", (0).to_bytes(8, "big")])
    replayed = []
    while dealer.poll(5000):
        fr = dealer.recv_multipart()
        replayed.append((time.time(), fr, True))
        if len(fr) >= 3 and fr[2] == END_SEQ:
            break

    summary = {"steps": steps, "live": [], "replay": []}
    for kind, group in (("live", msgs), ("replay", replayed)):
        for t, fr, _ in group:
            row = {"nframes": len(fr), "frame_lens": [len(f) for f in fr]}
            body = fr[1:] if kind == "replay" else fr  # a DEALER gets [b"", topic, seq, payload]
            if kind == "replay":
                row["delimiter"] = fr[0].hex()
            row["topic"] = body[0].decode(errors="replace")
            row["seq"] = int.from_bytes(body[1], "big", signed=True)
            if body[2]:
                batch = msgspec.msgpack.decode(body[2])
                row["batch_len"] = len(batch)
                row["ts"] = batch[0]
                row["rank"] = batch[2] if len(batch) > 2 else "absent"
                row["events"] = [{k: (f"{type(v).__name__}[{len(v)}]" if isinstance(v, list) else v)
                                  for k, v in e.items()} for e in batch[1]]
            summary[kind].append(row)
    print(json.dumps(summary, indent=1, default=str))
    if a.out:
        with open(a.out, "w") as f:
            for t, fr, rep in msgs + replayed:
                fr = fr[1:] if rep else fr  # without the DEALER's empty delimiter: [topic, seq, payload]
                f.write(json.dumps({"t": t, "frames": [base64.b64encode(x).decode() for x in fr],
                                    "replayed": rep}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
