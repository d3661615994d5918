"""``kda-ref bench serve``'s pieces: the load generator's arrivals and percentiles, and one run whose client
counts equal what the server's /metrics reports."""

from __future__ import annotations

import pytest

pytest.importorskip("uvicorn")

from kda_ref.bench import serve as bs  # noqa: E402
from kda_ref.bench.args import parse  # noqa: E402
from kda_ref.server.load import RequestTiming, run_load, summarize  # noqa: E402
from kda_ref.utils.stats import nearest_rank  # noqa: E402


def test_percentiles_are_nearest_rank():
    v = [float(i) for i in range(1, 101)]
    assert (nearest_rank(v, 50), nearest_rank(v, 90), nearest_rank(v, 99), nearest_rank(v, 100)) == (50.0, 90.0, 99.0, 100.0)
    assert nearest_rank([3.0], 99) == 3.0 and nearest_rank([], 50) is None


def test_summary_counts_tokens_and_times():
    t = RequestTiming(sent=0.0, ttft=0.1, chunk_times=[0.1, 0.3, 0.6], end=0.6, output_tokens=3)
    bad = RequestTiming(sent=0.0, end=1.0, error="HTTP 503")
    row = summarize([t, bad], duration=2.0)
    assert (row["completed"], row["failed"], row["output_tokens"]) == (1, 1, 3)
    assert row["request_throughput"] == 0.5 and row["output_tok_s"] == 1.5
    assert row["tpot_mean_ms"] == pytest.approx(250.0) and row["itl_p99_ms"] == pytest.approx(300.0)
    assert row["ttft_p50_ms"] == pytest.approx(100.0) and row["e2e_mean_ms"] == pytest.approx(600.0)


def test_one_run_agrees_with_the_servers_metrics():
    """One server as kda-ref serve runs it (the engine in a process of its own)."""
    from kda_ref import ModelConfig

    # the first 12 arrivals of five conversations: 7 are later turns, most sent once their earlier turn ended
    reqs = bs.workload_requests("multi_turn", 12, 6, 0, ModelConfig.micro().vocab_size)
    row = bs.run_one("micro", "radix", reqs, concurrency=2, max_num_seqs=4)
    assert row["completed"] == row["server_requests"] == 12 and row["failed"] == 0
    assert row["output_tokens"] == row["server_output_tokens"] == sum(n for _, n in reqs)
    assert row["server_cache_hit_tokens"] > 0  # multi-turn prompts share their prefixes
    assert 0 < row["server_ttft_mean_ms"] <= row["ttft_mean_ms"] * 1.5 + 50


def test_arguments_are_checked_before_anything_runs():
    with pytest.raises(SystemExit):
        parse("serve", ["--rates", "0"])
    with pytest.raises(ValueError, match="exactly one"):
        run_load("http://127.0.0.1:9", [], rate=1.0, concurrency=2)


def test_a_running_server_is_loaded_and_its_counters_read_as_differences():
    from kda_ref import LLM, ModelConfig
    from kda_ref.model import HybridModel
    from kda_ref.server.serve import ServerThread, make_server

    model = HybridModel(ModelConfig.micro(), seed=0, chunk_size=16).eval()
    reqs = bs.workload_requests("shared_system_prompt", 6, 4, 0, model.config.vocab_size)
    srv = make_server(LLM(model, prefix_cache="radix"), None, model_name="micro")
    with ServerThread(srv) as url:
        bs.run_external(url, reqs[:2], concurrency=2)  # traffic before: not this run's
        row = bs.run_external(url, reqs, concurrency=3)
    assert row["completed"] == row["server_requests"] == 6
    assert row["output_tokens"] == row["server_output_tokens"] == sum(n for _, n in reqs)


@pytest.mark.parametrize("cut", [
    b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n'
    b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"te',  # a stream cut mid-line
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'22\r\ndata: {"choices":[{"text":"a"}]}\n\n\r\n40\r\ndata: {',  # a chunked body cut short
])
def test_a_request_whose_stream_breaks_is_counted_failed_not_dropped(cut):
    """Only a socket error was caught: a stream cut mid-line (a JSON error) or mid-chunk (an incomplete read)
    ended its thread with no timing, and the run reported fewer requests and no failure."""
    import socket
    import threading

    def serve(sock):
        for _ in range(2):
            conn, _ = sock.accept()
            conn.recv(65536)
            conn.sendall(cut)
            conn.close()

    with socket.create_server(("127.0.0.1", 0)) as sock:
        threading.Thread(target=serve, args=(sock,), daemon=True).start()
        timings, took = run_load(f"http://127.0.0.1:{sock.getsockname()[1]}", [("p", 4), ("p", 4)], concurrency=1)
    assert len(timings) == 2 and all(t.error for t in timings)
    row = summarize(timings, took)
    assert (row["requests"], row["failed"]) == (2, 2)
