"""Bounded soak test of `invar serve` (issue 13): for INVAR_SOAK_S seconds (default 25), many
concurrent loopback clients send a mix of normal, streamed, cancelled (disconnecting, reset,
half-closed) and malformed requests, slow and idle sockets included. Checked:

- a reference request sent now and then keeps its exact bits (text and logprob text) throughout;
- every answer is the one expected for its kind (200 and a whole body, [DONE], a 4xx);
- the server's RSS after the first third (the warm-up) stays within RSS_TOLERANCE_MIB of its peak
  in the warm-up (the KV pool is kept small and touched whole before the load starts);
- at the end no KV block is in use (none leaked), no request is active, and the server's threads
  and file descriptors are back to what they were before the load. (The leaving clients ask for
  600 tokens: were they not cancelled, the backlog would swamp the server and these checks.)

Marked `soak`: it runs in the normal suite (about 35 s); `-m "not soak"` leaves it out.
"""
import http.client
import json
import os
import random
import signal
import socket
import struct
import threading
import time

import pytest

from test_server import MODEL, metrics, post_bytes, send_request, start_server, wait_idle_engine

pytestmark = pytest.mark.soak

DURATION_S = float(os.environ.get("INVAR_SOAK_S", "25"))
WORKERS = 10
RSS_TOLERANCE_MIB = 8  # seen: under 1 MiB of drift after the warm-up
REFERENCE = {"prompt": "The soak test's reference request:", "max_tokens": 12, "temperature": 0.9, "seed": 4242,
             "logprobs": 2, "ignore_eos": True}


def proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def n_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def reference_answer(status, raw):
    assert status == 200, raw
    c = json.loads(raw.decode("utf-8"), parse_float=str)["choices"][0]
    return c["text"], c["logprobs"]["token_logprobs"], c["logprobs"]["top_logprobs"]


def read_response(s):
    r = http.client.HTTPResponse(s)
    r.begin()
    body = r.read()
    r.close()
    return r.status, body


def prompt(rng):
    return f"Item {rng.randrange(10 ** 6)}: tell me about " + rng.choice(["cats", "rivers", "prime numbers", "tea"])


# ---- the kinds of client; each returns normally when the server behaved ----------------------

def normal(port, rng, ref):
    body = {"prompt": prompt(rng), "max_tokens": rng.randint(1, 12), "temperature": rng.choice([0, 0.8]),
            "seed": rng.randrange(100), "logprobs": rng.choice([None, 0, 3]), "n": rng.choice([1, 1, 2])}
    st, raw = post_bytes(port, "/v1/completions", json.dumps(body).encode())
    assert st == 200, raw
    assert len(json.loads(raw.decode("utf-8"))["choices"]) == body["n"]


def chat_stream(port, rng, ref):
    s = send_request(port, {"messages": [{"role": "user", "content": prompt(rng)}], "max_tokens": rng.randint(1, 10),
                            "stream": True}, path="/v1/chat/completions")
    st, body = read_response(s)
    s.close()
    assert st == 200 and body.rstrip().endswith(b"data: [DONE]"), body


def reference(port, rng, ref):
    got = reference_answer(*post_bytes(port, "/v1/completions", json.dumps(REFERENCE).encode()))
    assert got == ref, "the reference request's bits changed under load"


def stream_then_leave(port, rng, ref):
    s = send_request(port, {"prompt": prompt(rng), "max_tokens": 600, "ignore_eos": True, "stream": True})
    got = b""
    while got.count(b"data:") < rng.randint(1, 3):
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    if rng.random() < 0.5:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset
    s.close()


def wait_then_leave(port, rng, ref):
    s = send_request(port, {"prompt": prompt(rng), "max_tokens": 600, "ignore_eos": True})
    time.sleep(rng.uniform(0.05, 0.6))
    s.close()


def half_closed(port, rng, ref):
    s = send_request(port, {"prompt": prompt(rng), "max_tokens": rng.randint(8, 24), "ignore_eos": True})
    s.shutdown(socket.SHUT_WR)
    st, body = read_response(s)
    s.close()
    assert st == 200 and json.loads(body)["choices"][0]["finish_reason"] == "length", body


MALFORMED = [b"{not json", b'{"prompt": "x"} junk', b'{"prompt": "x", "model": "\xff\xfe"}', b"[1, 2]",
             b'{"prompt": "x", "max_tokens": -1}', b'{"prompt": "' + b"a" * (80 << 10) + b'"}']


def malformed(port, rng, ref):
    st, raw = post_bytes(port, "/v1/completions", rng.choice(MALFORMED))
    assert 400 <= st < 500 and "error" in json.loads(raw.decode("utf-8")), raw


def slow_socket(port, rng, ref):
    """Headers that never end, or nothing at all: the request timeout (2 s) drops it."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(rng.choice([b"", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"]))
    s.settimeout(10)
    try:
        assert s.recv(4096) == b""
    except ConnectionResetError:
        pass
    s.close()


KINDS = [(normal, 5), (chat_stream, 3), (reference, 2), (stream_then_leave, 2), (wait_then_leave, 2),
         (half_closed, 1), (malformed, 2), (slow_socket, 1)]


def test_soak():
    if not MODEL.exists():
        pytest.skip("default model missing")
    # A small KV pool (44 blocks), so all of its memory is touched before the load starts.
    proc, port = start_server("--max-connections", "32", "--kv-mem-mb", "32", "--max-body-kb", "64",
                              "--request-timeout-s", "2")
    try:
        ref = reference_answer(*post_bytes(port, "/v1/completions", json.dumps(REFERENCE).encode()))
        for word in ("apple ", "river "):  # two 350-token prompts: every KV block's memory touched once
            body = json.dumps({"prompt": word * 350, "max_tokens": 1}).encode()
            assert post_bytes(port, "/v1/completions", body)[0] == 200
        base_threads, base_fds = proc_status(proc.pid, "Threads"), n_fds(proc.pid)
        t0 = time.time()
        t_end = t0 + DURATION_S
        failures, counts, rss, lock = [], {k.__name__: 0 for k, _ in KINDS}, [], threading.Lock()
        kinds = [k for k, w in KINDS for _ in range(w)]

        def worker(i):
            rng = random.Random(i)
            while time.time() < t_end and len(failures) < 5:
                kind = rng.choice(kinds)
                try:
                    kind(port, rng, ref)
                    with lock:
                        counts[kind.__name__] += 1
                except Exception as e:  # noqa: BLE001 - every failure is reported below
                    failures.append(f"{kind.__name__}: {e!r}"[:400])

        def sample_rss():
            while time.time() < t_end:
                rss.append((time.time() - t0, proc_status(proc.pid, "VmRSS") / 1024))
                time.sleep(0.25)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
        threads.append(threading.Thread(target=sample_rss))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures
        assert all(counts.values()), counts

        warm = DURATION_S / 3
        peak_warm = max(r for t, r in rss if t < warm)
        peak_after = max(r for t, r in rss if t >= warm)
        print(f"soak: {counts}; RSS warm-up peak {peak_warm:.1f} MiB, after {peak_after:.1f} MiB")
        assert peak_after - peak_warm <= RSS_TOLERANCE_MIB, [round(r, 1) for t, r in rss]

        m = wait_idle_engine(port)  # no KV block in use: none leaked by cancelled requests
        # A handler whose client left may still be returning when the engine is idle (seen once
        # on a loaded 2-core machine): wait for it, so only a handler that never ends fails.
        deadline = time.time() + 10
        while m["invar_active_requests"] != 0 and time.time() < deadline:
            time.sleep(0.1)
            m = metrics(port)
        assert m["invar_kv_blocks_in_use"] == 0 and m["invar_active_requests"] == 0, m
        assert m["invar_requests_cancelled_total"] > 0
        deadline = time.time() + 10  # connection threads exit once their sockets close
        while time.time() < deadline and (proc_status(proc.pid, "Threads") > base_threads + 1
                                          or n_fds(proc.pid) > base_fds + 1):
            time.sleep(0.1)
        assert proc_status(proc.pid, "Threads") <= base_threads + 1
        assert n_fds(proc.pid) <= base_fds + 1
        assert reference_answer(*post_bytes(port, "/v1/completions", json.dumps(REFERENCE).encode())) == ref
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
