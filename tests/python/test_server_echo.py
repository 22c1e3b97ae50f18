"""`echo` + `logprobs` on /v1/completions (docs/server.md): the prompt's logprobs come from the
engine, computed in the request's own prefill inside --kv-mem-mb, so

- they are computed by the engine even when the prefix cache holds the prompt (counted in
  invar_tokens_computed_total) and equal `invar score` bit for bit;
- the server's memory does not grow with them: two concurrent echoes of a 300-token prompt
  raise the peak RSS by far less than one scoring pass of its own (logits rows, KV) would take;
- a prompt the KV pool cannot hold is refused with a message;
- a client that disconnects mid-prefill has its request cancelled and its KV blocks freed.

The servers run small (--max-batch-tokens 4 to 32, --kv-mem-mb 24) so that a prompt takes many
steps. Set INVAR_BIN (or INVAR_BUILD_DIR) to the binary to test.
"""
import functools
import http.client
import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
N_PROMPT = 300


@functools.lru_cache(None)
def find_bin():
    if os.environ.get("INVAR_BIN"):
        return os.environ["INVAR_BIN"]
    p = Path(os.environ.get("INVAR_BUILD_DIR", str(ROOT / "build"))) / "invar"
    if not p.exists():
        pytest.skip("no invar binary built (set INVAR_BIN)")
    return str(p)


@functools.lru_cache(None)
def text_ids():
    text = " ".join(f"Line {i}: the keeper wound the clock and wrote down the wind." for i in range(60))
    out = subprocess.run([find_bin(), "tokenize", text], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    ids = [int(x) for x in out.split()]
    assert len(ids) >= 600
    return ids


def prompt_ids():
    return text_ids()[:N_PROMPT]


def start_server(*extra):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([find_bin(), "serve", "--port", str(port), "--kv-mem-mb", "24", *extra], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.time()
    while time.time() - t0 < 60:
        if proc.poll() is not None:
            raise RuntimeError("server exited: " + proc.stderr.read().decode())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not come up")


@pytest.fixture
def serve():
    if not MODEL.exists():
        pytest.skip("default model missing")
    procs = []

    def start(*extra):
        proc, port = start_server(*extra)
        procs.append(proc)
        return proc, port

    yield start
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def post(port, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    return r.status, text


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {k: float(v) for k, v in (l.rsplit(" ", 1) for l in text.splitlines() if l and not l.startswith("#"))}


def peak_rss_mb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    pytest.skip("no VmHWM in /proc")


def echo_body(ids):
    return {"prompt": ids, "max_tokens": 1, "echo": True, "logprobs": 0}


def test_echo_logprobs_from_the_engine_bounded(serve):
    ids = prompt_ids()
    proc, port = serve("--max-batch", "4", "--max-batch-tokens", "32")
    # Warm-up without echo: the prefix cache now holds the prompt, the KV pool's pages are touched.
    st, text = post(port, {"prompt": ids, "max_tokens": 1})
    assert st == 200, text
    m0, rss0 = metrics(port), peak_rss_mb(proc.pid)
    results = [None, None]

    def one(i):
        results[i] = post(port, echo_body(ids))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    m1, rss1 = metrics(port), peak_rss_mb(proc.pid)
    ref = subprocess.run([find_bin(), "score", "--threads", "2", "--prompt-ids", str(ids[0]), "--continuation-ids",
                          ",".join(map(str, ids[1:]))], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    want = json.loads(ref, parse_float=str)["logprobs"]
    for st, text in results:
        assert st == 200, text
        lp = json.loads(text, parse_float=str)["choices"][0]["logprobs"]["token_logprobs"]
        assert lp[0] is None
        assert lp[1:N_PROMPT] == want  # bitwise: the same float32 text
    # Computed by the engine, cache or not: each echo's prefill ran every prompt position.
    assert m1["invar_tokens_computed_total"] - m0["invar_tokens_computed_total"] >= 2 * N_PROMPT
    # A scoring pass outside the engine would hold 256 logits rows (50 MB) and its own KV.
    assert rss1 - rss0 < 40, f"peak RSS grew by {rss1 - rss0:.1f} MB"
    assert m1["invar_kv_blocks_in_use"] == 0
    # A prompt the 24 MiB KV pool (33 blocks) cannot hold is refused, not computed elsewhere.
    st, text = post(port, echo_body(text_ids()[:600]))
    assert st == 400, text
    assert "KV blocks" in json.loads(text)["error"]["message"]


def disconnect_during_echo(port: int, ids) -> tuple:
    """Sends an echo request, resets the connection once the engine has started on it, waits
    for the call and its KV blocks to go, and returns (cancelled, positions computed)."""
    m0 = metrics(port)
    body = json.dumps(echo_body(ids)).encode()
    s = socket.create_connection(("127.0.0.1", port))
    # Linger 0: close() resets the connection, which the waiting call sees at its next look
    # (a FIN alone could be a half-close: the server learns of it only from a failed write).
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    start = time.time() + 10
    while time.time() < start and metrics(port)["invar_tokens_computed_total"] == m0["invar_tokens_computed_total"]:
        time.sleep(0.002)
    s.close()
    deadline = time.time() + 30
    while time.time() < deadline:
        m = metrics(port)
        # The HTTP call ends first; the engine loop then cancels the request and frees its
        # blocks on its next pass, so wait for both.
        if m["invar_active_requests"] == 0 and m["invar_kv_blocks_in_use"] == 0:
            break
        time.sleep(0.05)
    # Whatever the timing: nothing is left running or holding KV.
    assert m["invar_active_requests"] == 0
    assert m["invar_kv_blocks_in_use"] == 0
    return (m["invar_requests_cancelled_total"] - m0["invar_requests_cancelled_total"],
            m["invar_tokens_computed_total"] - m0["invar_tokens_computed_total"])


def test_echo_cancelled_on_disconnect(serve):
    ids = prompt_ids()
    # One position a step (max_batch_tokens is at least max_batch), one thread: the echo's
    # 300-position prefill takes hundreds of steps, and the reset is seen within a poll
    # (0.05 s). /metrics answers mid-step (the engine publishes its stats; before, a reader
    # could starve on the step's lock for hundreds of positions and this test lost its race).
    proc, port = serve("--max-batch", "1", "--max-batch-tokens", "1", "--threads", "1")
    st, text = post(port, {"prompt": ids, "max_tokens": 1})  # cached: only the echo's prefill is left
    assert st == 200, text
    cancelled, computed = disconnect_during_echo(port, ids)
    # It stopped part-way: counted as cancelled, far fewer positions computed than the prompt has.
    assert cancelled == 1 and computed < N_PROMPT // 2, (cancelled, computed)
