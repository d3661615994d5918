"""Against the real thing (slow; skipped without vLLM's CPU build in ``.vllm-venv``, made by
``scripts/vllm_cpu_venv.sh``): the real vLLM 0.32 server on a tiny Llama with KV events and forced
evictions, followed by ``kda-ref watch`` -- its blocks equal what vLLM's own decoder reads from the same
stream, its prefix counters equal vLLM's ``/metrics`` -- and vLLM's decoder reads every batch
``kda-ref serve`` publishes, for both caches."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("zmq")

ROOT = pathlib.Path(__file__).resolve().parents[1]
VLLM_PY = pathlib.Path(os.environ.get("KDA_VLLM_PYTHON", ROOT / ".vllm-venv" / "bin" / "python"))
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not VLLM_PY.exists(), reason="no vLLM CPU venv (bash scripts/vllm_cpu_venv.sh)")]

# vLLM's own decoder, run in vLLM's venv over the payloads given (base64, one a line): the stored-and-not-
# removed blocks after them, as JSON, or the first payload it refuses
VLLM_DECODE = r"""
import base64, json, sys
import msgspec
from vllm.distributed.kv_events import KVEventBatch, BlockStored, BlockRemoved, AllBlocksCleared
dec = msgspec.msgpack.Decoder(KVEventBatch)
blocks = {}
for line in sys.stdin:
    batch = dec.decode(base64.b64decode(line))
    for ev in batch.events:
        if isinstance(ev, AllBlocksCleared):
            blocks.clear()
        elif isinstance(ev, BlockRemoved):
            for h in ev.block_hashes:
                blocks.pop((ev.group_idx, h), None)
        else:
            parent, n = ev.parent_block_hash, ev.block_size
            for i, h in enumerate(ev.block_hashes):
                blocks[(ev.group_idx, h)] = [parent, ev.token_ids[i * n:(i + 1) * n], ev.kv_cache_spec_kind]
                parent = h
print(json.dumps([[g, h, p, t, k] for (g, h), (p, t, k) in blocks.items()]))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vllm_decode(payloads: list[bytes]) -> dict:
    import base64

    p = subprocess.run([str(VLLM_PY), "-c", VLLM_DECODE], input="\n".join(base64.b64encode(x).decode()
                                                                          for x in payloads),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return {(g, h): (parent, tuple(tokens), kind) for g, h, parent, tokens, kind in json.loads(p.stdout)}


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    port, kv, replay = _free_port(), _free_port(), _free_port()
    folder = tmp_path_factory.mktemp("tiny_llama")
    proc = subprocess.Popen([str(VLLM_PY), str(ROOT / "scripts" / "vllm_tiny_server.py"), "--folder", str(folder),
                             "--port", str(port), "--kv-port", str(kv), "--replay-port", str(replay),
                             "--num-blocks", "24", "--max-model-len", "736", "--log", str(folder / "server.log")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line, "the vLLM server did not start"
        yield json.loads(line)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


def _complete(url: str, prompt, n: int = 8, model: str = "tiny") -> None:
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=120).read()


def test_kda_ref_watch_follows_the_real_vllm(vllm_server, tmp_path):
    from kda_ref.kv_events.forest import Forest
    from kda_ref.kv_events.metrics import snapshot
    from kda_ref.kv_events.subscriber import Capture, Subscriber
    from kda_ref.kv_events.watch import sources_of

    url = vllm_server["url"]
    (src,) = sources_of(url, report=pytest.fail)  # vLLM's /kv_event_sources, its wildcard host replaced
    forest, record = Forest(), tmp_path / "vllm.jsonl"
    sub = Subscriber([src], forest, Capture(record, {"url": url, "sources": [src.__dict__]})).connect()
    time.sleep(0.5)
    stem = "The quick brown fox jumps over the lazy dog while the cache keeps every shared block. " * 2
    for i in range(10):  # shared prefixes, then distinct prompts past the 23 usable blocks: evictions
        _complete(url, stem + f"variant {i % 3}" if i < 4 else f"{i} distinct prompt " * 14)
        sub.pump(0.2)
    sub.pump(1.0)
    sub.close()
    payloads = [e["frames"][2] for e in __import__("kda_ref.kv_events.subscriber", fromlist=["x"])
                .read_capture(record)[1] if "frames" in e]
    theirs = vllm_decode(payloads)  # vLLM's own decoder over the very frames the watcher took
    ours = {(gi, h): (n.parent, n.tokens, g.kind) for (_, gi), g in forest.groups.items() for h, n in g.blocks.items()}
    assert ours == theirs and forest.counts.removed > 0 and forest.counts.lost == 0
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        m = snapshot(r.read().decode())
    assert m["engine"] == "vllm" and m["prefix_cache"]["queries"] > 0 and m["prefix_cache"]["hits"] > 0
    p = subprocess.run([sys.executable, "-m", "kda_ref.cli", "watch", url, "--json", "--seconds", "1.5"],
                       capture_output=True, text=True, timeout=120)
    last = json.loads(p.stdout.splitlines()[-1])
    assert p.returncode == 0 and last["engine"] == "vllm" and last["model"] == "tiny"
    assert last["prefix_cache"] == m["prefix_cache"]  # the server's own counters (no request since)
    assert {g["kind"] for g in last["groups"]} == {"full_attention"} and last["groups"][0]["block_size"] == 32
    assert sum(g["blocks"] for g in last["groups"]) == len(theirs)  # replayed from vLLM's buffer at the start


@pytest.mark.parametrize("cache", [dict(prefix_cache="radix"), dict(prefix_cache="block", block_size=32,
                                                                     hash_unit=16)], ids=["radix", "block"])
def test_vllms_decoder_reads_every_batch_kda_ref_serve_publishes(cache, tmp_path):
    from kda_ref import LLM, ModelConfig
    from kda_ref.kv_events.config import parse_kv_events_config
    from kda_ref.kv_events.forest import Forest
    from kda_ref.kv_events.subscriber import Capture, Subscriber, read_capture
    from kda_ref.kv_events.watch import sources_of
    from kda_ref.model import HybridModel
    from kda_ref.server.serve import ServerThread, make_server

    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    cfg = parse_kv_events_config({"enable_kv_cache_events": True, "endpoint": "tcp://*:0", "replay_endpoint": "tcp://*:0"})
    from test_engine import STATE

    llm = LLM(model, memory_budget_bytes=6 * STATE + 400 * 320, max_num_batched_tokens=64, **cache)  # evicts
    with ServerThread(make_server(llm, None, model_name="micro", kv_events=cfg)) as url:
        (src,) = sources_of(url, report=pytest.fail)
        forest, record = Forest(), tmp_path / "ours.jsonl"
        sub = Subscriber([src], forest, Capture(record, {"url": url})).connect()
        time.sleep(0.3)
        for i in range(12):
            _complete(url, list(range(1, 40)) + [100 + i] * (20 + 9 * i), 4, model="micro")
            sub.pump(0.1)
        llm_blocks = llm.prefix_cache.kv_blocks()
        sub.pump(1.0)
        sub.close()
    payloads = [e["frames"][2] for e in read_capture(record)[1] if "frames" in e]
    theirs = vllm_decode(payloads)
    want = {(g, h): (b.parent, b.tokens, "mla_attention" if g == 0 else "mamba")
            for g, blocks in llm_blocks.groups.items() for h, b in blocks.items()}
    assert theirs == want and forest.counts.removed > 0
