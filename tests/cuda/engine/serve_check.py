#!/usr/bin/env python3
"""`invar serve --device cuda` under concurrent clients gives the bits of requests sent alone.

Starts the server, sends 24 seeded completions (greedy and temperature 0.8, with logprobs)
one at a time to the idle server, then all of them at once among 40 filler requests from
concurrent clients, in shuffled order, and compares text, token logprobs and top
alternatives exactly. Negative control: the same comparison on a server started with
--cuda-gemm cublas on the Llama-3-8B widths would differ; on small models cuBLAS agrees with
itself, so the control here is reported, not required (test_cuda_engine holds the
required controls).

Usage: serve_check.py INVAR_BIN MODEL.gguf [PORT]
"""
import json
import random
import subprocess
import sys
import threading
import time
import urllib.request


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def wait_ready(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("server did not come up")


def key(resp):
    c = resp["choices"][0]
    lp = c.get("logprobs") or {}
    return (c["text"], lp.get("tokens"), lp.get("token_logprobs"), json.dumps(lp.get("top_logprobs")))


def main():
    invar_bin, model = sys.argv[1], sys.argv[2]
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 18080
    rng = random.Random(5)
    targets = [{"prompt": f"Story {i}: once upon a time, in a land of {w},", "max_tokens": 24,
                "temperature": 0.0 if i % 2 == 0 else 0.8, "seed": 100 + i, "logprobs": 3, "ignore_eos": True}
               for i, w in enumerate(["rivers", "glass", "owls", "salt", "ice", "gears"] * 4)]
    fillers = [{"prompt": "filler " * rng.randint(1, 60), "max_tokens": rng.randint(1, 30),
                "temperature": rng.choice([0.0, 0.7]), "seed": i, "ignore_eos": True} for i in range(40)]
    proc = subprocess.Popen([invar_bin, "serve", "--device", "cuda", "--model", model, "--port", str(port),
                             "--max-batch", "64", "--threads", "4"])
    try:
        wait_ready(port, proc)
        alone = [key(post(port, t)) for t in targets]
        jobs = [("t", i, t) for i, t in enumerate(targets)] + [("f", i, f) for i, f in enumerate(fillers)]
        rng.shuffle(jobs)
        together = [None] * len(targets)
        errors = []

        def client(job):
            kind, i, body = job
            try:
                r = post(port, body)
                if kind == "t":
                    together[i] = key(r)
            except Exception as e:  # noqa: BLE001 - collected and reported
                errors.append(repr(e))

        threads = [threading.Thread(target=client, args=(j,)) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        mism = sum(a != b for a, b in zip(alone, together))
        print(f"serve --device cuda: {mism} of {len(targets)} requests differ alone vs among "
              f"{len(jobs)} concurrent ({len(errors)} client errors)")
        return 1 if mism or errors else 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
