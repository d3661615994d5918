"""``kda-ref serve`` as a process: it starts on the flags given (engine keywords included), serves, and on
SIGTERM stops taking connections, finishes the requests in flight and exits 0; bad flags exit 2."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("uvicorn")

TIMEOUT = 90


def start(*args: str) -> tuple[subprocess.Popen, str]:
    """``kda-ref serve random-micro --port 0 ARGS`` and its URL (read from uvicorn's start line)."""
    proc = subprocess.Popen([sys.executable, "-m", "kda_ref.cli", "serve", "random-micro", "--port", "0", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + TIMEOUT
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        m = re.search(r"running on (http://\S+)", line, re.I)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
            return proc, m.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("kda-ref serve did not start:\n" + "".join(lines))


def stream_completion(url: str, out: dict, key: int, started: threading.Event) -> None:
    """One streaming request read to its end: the finish reason, or the error it met."""
    body = json.dumps({"prompt": f"request {key}", "max_tokens": 160, "temperature": 0, "stream": True,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            reason = None
            for raw in r:
                line = raw.decode().strip()
                if line.startswith("data: {"):
                    started.set()
                    reason = json.loads(line[6:])["choices"][0]["finish_reason"] or reason
            out[key] = reason
    except Exception as e:  # noqa: BLE001
        out[key] = repr(e)


def accepted(url: str) -> int:
    """Requests the server has taken in, from ``/metrics``: running, waiting and ended ones."""
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    names = ("kda_num_requests_running", "kda_num_requests_waiting", "kda_request_success_total")
    return int(sum(float(m.group(2)) for m in re.finditer(r"^(\w+)(?:\{[^}]*\})? (\S+)$", text, re.M)
                   if m.group(1) in names))


def wait_until_accepted(url: str, n: int) -> None:
    """Block until the server has taken in ``n`` requests (a SIGTERM before that races the connection)."""
    deadline = time.monotonic() + TIMEOUT
    while accepted(url) < n:
        assert time.monotonic() < deadline, f"the server took in {accepted(url)} of {n} requests"
        time.sleep(0.02)


# the engine thread's drain on a signal runs by default in the SIGHUP test below
@pytest.mark.parametrize("where", [[], pytest.param(["--engine-in-process"], marks=pytest.mark.slow)],
                         ids=["engine process", "engine thread"])
def test_sigterm_mid_load_finishes_what_is_in_flight_and_exits_0(where):
    """Either way the engine runs (its own process, by default, or a thread of the server's)."""
    proc, url = start("--max-num-seqs", "2", "--prefix-cache", "radix", *where)
    try:
        out, started = {}, [threading.Event() for _ in range(4)]
        threads = [threading.Thread(target=stream_completion, args=(url, out, i, started[i])) for i in range(4)]
        for t in threads:
            t.start()
        assert started[0].wait(TIMEOUT)  # tokens are flowing
        wait_until_accepted(url, 4)  # all four are in flight (two run, two wait)
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(TIMEOUT)
        assert out == {i: "length" for i in range(4)}  # every request in flight finished in full
        assert proc.wait(TIMEOUT) == 0
        with pytest.raises(urllib.error.URLError):  # and it no longer accepts connections
            urllib.request.urlopen(url + "/health", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _parents() -> dict[int, tuple[int, str]]:
    """Every process now: pid -> (its parent's pid, its state letter), from /proc."""
    out = {}
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(d)] = (int(fields[1]), fields[0])
        except (ValueError, OSError):
            continue
    return out


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now."""
    parents = _parents()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, (pp, _) in parents.items() if pp in frontier} - found
        found |= frontier
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_killed_server_leaves_no_engine_process_behind():
    """SIGKILL gives the server no chance to stop its engine process: the engine process finds the pipe
    ended and exits by itself (and the worker processes' forkserver with it)."""
    proc, url = start()
    try:
        below = _descendants(proc.pid)
        assert below, "the engine runs in a process of its own"
        proc.kill()
        proc.wait(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while below and time.monotonic() < deadline:
            alive = _parents()
            below = {p for p in below if p in alive and alive[p][1] != "Z"}
            time.sleep(0.05)
        assert not below, f"still running after the server was killed: {below}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("args,flag", [(["--max-waiting", "0"], "--max-waiting"),
                                       (["--max-num-seqs", "x"], "--max-num-seqs"),
                                       (["--prefix-cache", "lru"], "--prefix-cache"),
                                       (["--port", "70000"], "--port"),
                                       (["--max-num-seqs", "0"], "--max-num-seqs: must be an int in [1, 4096]"),
                                       (["--block-size", "64"], "--block-size"),  # without its cache
                                       (["--threads", "5000"], "--threads: must be >= 1 and <= 1024"),
                                       (["--api-key", "abc "], "--api-key: must be non-empty printable"),
                                       (["--threads", "0"], "--threads"),
                                       (["--kv-events-config", "{"], "--kv-events-config: kv_events_config: not "
                                                                     "valid JSON"),
                                       (["--kv-events-config", '{"hwm": 0}'], "hwm: must be an integer >= 1"),
                                       (["--kv-events-config", '{"enable_kv_cache_events": true, "endpoint": "x"}'],
                                        "endpoint: must be a ZMQ address"),
                                       (["--served-model-name", "a", "a"], "--served-model-name: names must be"),
                                       (["--model-that-is-not"], "unrecognized")])
def test_bad_flags_exit_2_naming_them(args, flag, capsys):
    from kda_ref.cli import main

    with pytest.raises(SystemExit) as e:
        main(["serve", "random-micro", *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and flag in err and err.count("\n") == 1


def test_a_model_written_after_the_served_names_is_refused(capsys):
    """``--served-model-name`` takes every word after it (vLLM's aliases): a model written there would have
    become a name while the default model loaded."""
    from kda_ref.cli import main
    from kda_ref.server.flags import parse

    with pytest.raises(SystemExit) as e:
        main(["serve", "--served-model-name", "mine", "random-micro"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "'random-micro' is a model" in err
    assert "serve random-micro --served-model-name mine" in err  # the command to write instead
    a = parse(["random-micro", "--served-model-name", "mine", "also-mine"])
    assert a.model == "random-micro" and a.served_model_name == ["mine", "also-mine"]


def test_a_model_folder_that_is_not_there_is_named(tmp_path, capsys):
    from kda_ref.cli import main

    with pytest.raises(SystemExit) as e:
        main(["serve", str(tmp_path / "nowhere")])
    assert e.value.code == 2 and capsys.readouterr().err.startswith("error: MODEL: ")


def test_every_engine_keyword_is_a_flag():
    from kda_ref.engine.config import EngineConfig, flat_keywords
    from kda_ref.server.flags import build_parser, engine_kwargs

    objects = {"draft_model"}  # a Python object, not a command-line value
    flags = set(vars(build_parser().parse_args([])))
    assert set(flat_keywords()) - objects <= flags
    a = build_parser().parse_args(["--prefix-cache", "radix", "--checkpoint-policy", "sglang", "--max-num-seqs", "3",
                                   "--static-decode"])
    kw = engine_kwargs(a)
    assert kw == {"prefix_cache": "radix", "checkpoint_policy": "sglang", "max_num_seqs": 3, "static_decode": True}
    assert EngineConfig.from_kwargs(**kw).scheduler.max_num_seqs == 3


def test_sigterm_past_the_shutdown_timeout_answers_what_it_cancels():
    """Requests far longer than --shutdown-timeout: each is answered (a 503 in OpenAI's shape; an error event
    and [DONE] in a stream), the engine thread ends without a traceback, the process exits 0."""
    proc = subprocess.Popen([sys.executable, "-m", "kda_ref.cli", "serve", "random-micro", "--port", "0",
                             "--shutdown-timeout", "1"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines = []
    try:
        while True:
            line = proc.stderr.readline()
            lines.append(line)
            m = re.search(r"running on (http://\S+)", line, re.I)
            if m or (not line and proc.poll() is not None):
                break
        url = m.group(1)
        rest = []
        threading.Thread(target=lambda: rest.append(proc.stderr.read()), daemon=True).start()
        out, started = {}, threading.Event()
        long = {"prompt": "long", "max_tokens": 6000, "ignore_eos": True, "temperature": 0}
        t1 = threading.Thread(target=lambda: out.update(stream=_sse_tail(url, long, started)))
        t2 = threading.Thread(target=lambda: out.update(whole=_post(url, long)))
        t1.start(), t2.start()
        assert started.wait(TIMEOUT)
        proc.send_signal(signal.SIGTERM)
        t1.join(TIMEOUT), t2.join(TIMEOUT)
        assert proc.wait(TIMEOUT) == 0
        status, body = out["whole"]
        assert status == 503 and body["error"]["code"] == "shutting_down"
        assert out["stream"][-2:] == ["error:shutting_down", "[DONE]"]
        time.sleep(0.2)
        assert "Traceback" not in "".join(rest), "".join(rest)[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _started_server(*args: str) -> tuple[subprocess.Popen, str, list[str]]:
    """``start`` keeping what the server logs after its start line (in ``rest``, once it exits)."""
    proc = subprocess.Popen([sys.executable, "-m", "kda_ref.cli", "serve", "random-micro", "--port", "0", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    while True:
        line = proc.stderr.readline()
        m = re.search(r"running on (http://\S+)", line, re.I)
        if m or (not line and proc.poll() is not None):
            break
    assert m, "kda-ref serve did not start"
    rest = []
    threading.Thread(target=lambda: rest.append(proc.stderr.read()), daemon=True).start()
    return proc, m.group(1), rest


def _trace_reader(url: str, out: dict) -> None:
    """An attached ``/kda/trace/stream`` reader: how long it stayed, read to the end the server gives."""
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url + "/kda/trace/stream", timeout=TIMEOUT) as r:
            for _ in r:
                pass
        out["trace"] = "ended"
    except Exception as e:  # noqa: BLE001
        out["trace"] = repr(e)
    out["trace_s"] = time.monotonic() - t0


@pytest.mark.parametrize("second", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
                         ids=["then-sigint", "then-sigterm"])
def test_a_second_signal_cancels_what_is_open_answering_each_and_exits_0(second):
    """Two signals under load cut streams with no error event, answered non-streaming requests with a
    plain-text 500 and logged tracebacks (uvicorn's force exit); a second SIGTERM made the exit code -15;
    an attached trace reader held the shutdown for the whole grace period. Now the second signal cancels
    what is open, each answered as the first signal's timeout would answer it, and the process exits 0
    long before --shutdown-timeout."""
    proc, url, rest = _started_server("--shutdown-timeout", "60")
    try:
        out, started = {}, threading.Event()
        long = {"prompt": "long", "max_tokens": 6000, "ignore_eos": True, "temperature": 0}
        threads = [threading.Thread(target=lambda: out.update(stream=_sse_tail(url, long, started))),
                   threading.Thread(target=lambda: out.update(whole=_post(url, long))),
                   threading.Thread(target=_trace_reader, args=(url, out))]
        for t in threads:
            t.start()
        assert started.wait(TIMEOUT)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        proc.send_signal(second)
        assert proc.wait(TIMEOUT) == 0
        assert time.monotonic() - t0 < 30  # not the 60 s grace period
        for t in threads:
            t.join(TIMEOUT)
        status, body = out["whole"]
        assert status == 503 and body["error"]["code"] == "shutting_down"
        assert out["stream"][-2:] == ["error:shutting_down", "[DONE]"]
        assert out["trace"] == "ended", out
        time.sleep(0.2)
        assert "Traceback" not in "".join(rest), "".join(rest)[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_trace_reader_does_not_hold_an_idle_shutdown():
    proc, url, _ = _started_server("--shutdown-timeout", "60")
    try:
        out = {}
        reader = threading.Thread(target=_trace_reader, args=(url, out))
        reader.start()
        time.sleep(1.0)  # attached, idle
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(TIMEOUT) == 0 and time.monotonic() - t0 < 10
        reader.join(TIMEOUT)
        assert out["trace"] == "ended"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("delay", [pytest.param(0.8, marks=pytest.mark.slow), 1.5,
                                   pytest.param(3.0, marks=pytest.mark.slow)])
def test_a_signal_while_starting_stops_it_with_exit_0(delay):
    """SIGINT during start-up was lost (no-op handlers were installed before uvicorn's): at any moment, from
    the imports to the first request, a signal stops the server with exit 0, one line, no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "kda_ref.cli", "serve", "random-micro", "--port", "0"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0 and "Traceback" not in err, err[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


_QUIET_LAUNCH = """
import json, os, signal, time
from multiprocessing import forkserver
from kda_ref.utils import procs

got = []
signal.signal(signal.SIGINT, lambda sig, frame: got.append(sig))
ctx = procs.worker_context("gloo")
ctx.set_forkserver_preload(procs.WORKER_PRELOAD[:1])  # the quieting module alone: no torch to import
launch = forkserver.ensure_running
def launch_with_a_signal():
    os.kill(os.getpid(), signal.SIGINT)  # a signal to the server's process while it launches the forkserver
    launch()
forkserver.ensure_running = launch_with_a_signal
procs.quiet_forkserver(ctx)
worker = ctx.Process(target=time.sleep, args=(1.0,))
worker.start()
time.sleep(0.3)
masks = lambda pid: {k: int(v, 16) for k, v in (line.split(":") for line in open(f"/proc/{pid}/status"))
                     if k in ("SigBlk", "SigIgn")}
print(json.dumps({"got": got, "forkserver": masks(forkserver._forkserver._forkserver_pid),
                  "worker": masks(worker.pid)}), flush=True)
worker.join()
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_signal_while_the_forkserver_launches_is_handled_and_its_workers_ignore_it():
    """The server's process launches the workers' forkserver with SIGINT and SIGHUP blocked, not ignored:
    a signal in those milliseconds reached no handler (the server started and ran on, about 1.3 s into its
    start); now it is handled once the launch ends. The forkserver and its workers ignore both (a terminal's
    Ctrl-C is the server's to handle) and block neither."""
    out = subprocess.run([sys.executable, "-c", _QUIET_LAUNCH], capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout)
    assert seen["got"] == [signal.SIGINT], seen
    quiet = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGHUP - 1))
    for process in ("forkserver", "worker"):
        assert seen[process]["SigIgn"] & quiet == quiet and seen[process]["SigBlk"] & quiet == 0, seen


def _post(url: str, body: dict):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _sse_tail(url: str, body: dict, started: threading.Event) -> list[str]:
    """A stream's events in short form: "text" per chunk, "error:<code>" for an error, "[DONE]"."""
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    seen = []
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        for raw in r:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                seen.append("[DONE]")
            elif line.startswith("data: {"):
                obj = json.loads(line[6:])
                seen.append(f"error:{obj['error']['code']}" if "error" in obj else "text")
                started.set()
    return seen


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
@pytest.mark.parametrize("delay", [pytest.param(1.0, marks=pytest.mark.slow), 1.8,
                                   pytest.param(4.0, marks=pytest.mark.slow)])  # 1.8: the server has just begun serving
def test_ctrl_c_from_a_terminal_stops_every_process_of_the_group_quietly(delay):
    """A terminal's Ctrl-C reaches the whole process group: the server, the worker processes' forkserver
    (which imports torch for seconds while the server starts) and the engine process. Whenever it comes,
    the server exits 0 without a traceback from any of them, and nothing of the group is left running."""
    with _own_session() as proc:
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        _assert_quiet_exit(proc)


@contextlib.contextmanager
def _own_session(*args: str):
    """``kda-ref serve random-micro ARGS`` in a session (and process group) of its own, as a terminal runs it;
    the whole group killed at the end if it is still there."""
    proc = subprocess.Popen([sys.executable, "-m", "kda_ref.cli", "serve", "random-micro", "--port", "0", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _assert_quiet_exit(proc: subprocess.Popen) -> None:
    """The server exits 0 without a traceback from any process of its group, and the group ends."""
    _, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0 and "Traceback" not in err, err[-2000:]
    _assert_session_ends(proc.pid)


def _assert_session_ends(sid: int) -> None:
    """Every process of session ``sid`` (the server's, which started it) ends within the timeout."""
    deadline = time.monotonic() + TIMEOUT
    while (group := [p for p, (_, st) in _session(sid).items() if st != "Z"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group, f"still running after the server exited: {group}"


def _session(sid: int) -> dict[int, tuple[int, str]]:
    """The processes of session ``sid`` now: pid -> (its parent, its state letter)."""
    out = {}
    for pid, (ppid, state) in _parents().items():
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[4]) == sid:
                    out[pid] = (ppid, state)
        except (ValueError, OSError):
            continue
    return out


def test_serve_without_its_extra_names_it_in_one_line_before_torch():
    """A Python without the serve extra: `kda-ref serve` (and its --help) is one line naming the extra,
    exit 2, and torch is never imported (the check runs before anything heavy)."""
    code = ("import sys, importlib.util as u; real = u.find_spec; "
            "u.find_spec = lambda name, *a: None if name == 'prometheus_client' else real(name, *a); "
            "from kda_ref.cli import main; rc = main(['serve', '--help']); "
            "print('torch' in sys.modules, file=sys.stderr); sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and lines[-1] == "False"  # torch not imported
    assert len(lines) == 2 and "serve extra" in lines[0] and "prometheus_client" in lines[0]
    assert "pip install" in lines[0]


def test_the_configuration_imports_without_torch():
    """The engine's configuration (and with it every engine flag of ``kda-ref serve``, made from its fields)
    imports in a fresh interpreter that never imports torch, and the flags cover every flat keyword ``LLM``
    accepts (``flat_keywords``) but the draft model object."""
    code = ("import sys; import kda_ref.engine.config as c; from kda_ref.server import flags; "
            "keys = {s['key'] for s in flags.SPECS['flags']} | {'prefix_cache'}; "
            "print(sorted(set(c.flat_keywords()) - keys), 'torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["['draft_model']", "False"]


@pytest.mark.parametrize("args,said", [
    (["--max-num-seqs", "0"], "error: --max-num-seqs: must be an int in [1, 4096], got 0"),
    (["--prefix-cache", "lru"], "error: --prefix-cache: invalid choice: 'lru'"),
    (["--num-speculative-tokens", "99"], "error: --num-speculative-tokens: must be an int in [1, 16], got 99"),
    (["--threads", "5000"], "error: --threads: must be >= 1 and <= 1024, got 5000"),
    (["--header-timeout", "nan"], "error: --header-timeout: must be in"),
    (["--help"], "usage: kda-ref serve"),
], ids=["range", "choice", "spec-range", "threads", "nan", "help"])
def test_serve_answers_its_flags_before_torch_loads(args, said):
    """``kda-ref serve`` imported torch and the engine (8-63 s on a loaded machine) before it read its
    flags: now ``--help`` and each bad value answer in a fresh interpreter that never imports torch."""
    code = ("import sys; from kda_ref.cli import main\n"
            "try:\n    rc = main(['serve', *sys.argv[1:]])\nexcept SystemExit as e:\n    rc = e.code\n"
            "print('torch imported:', 'torch' in sys.modules, file=sys.stderr); sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    assert p.returncode == (0 if args == ["--help"] else 2) and said in out, out[-800:]
    assert out.rstrip().endswith("torch imported: False"), out[-300:]


def test_the_default_threads_leave_the_event_loop_a_core():
    """Every core but one for torch (the HTTP event loop keeps the last), at least one, at most 16."""
    from kda_ref.utils import server_threads

    assert [server_threads(c) for c in (1, 2, 4, 17, 64)] == [1, 1, 3, 16, 16]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_a_terminal_hang_up_drains_like_sigterm():
    """SIGHUP to the whole process group (the terminal closed): the server finishes every stream in flight
    (each ends with its finish reason and ``[DONE]``), nothing of the group prints a traceback, the server
    exits 0 and no process of the session is left. With the engine in the server's process (the SIGTERM
    test runs the engine process by default): both modes drain on a signal in the default run."""
    with _own_session("--max-num-seqs", "2", "--engine-in-process") as proc:
        lines = []
        while not (m := re.search(r"running on (http://\S+)", line := proc.stderr.readline(), re.I)):
            lines.append(line)
            assert line or proc.poll() is None, "".join(lines)
        url, out = m.group(1), {}
        started = [threading.Event() for _ in range(3)]
        threads = [threading.Thread(target=stream_completion, args=(url, out, i, started[i])) for i in range(3)]
        for t in threads:
            t.start()
        assert started[0].wait(TIMEOUT)
        wait_until_accepted(url, 3)
        os.killpg(proc.pid, signal.SIGHUP)
        for t in threads:
            t.join(TIMEOUT)
        assert out == {i: "length" for i in range(3)}, out
        _assert_quiet_exit(proc)
