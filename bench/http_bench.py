#!/usr/bin/env python3
"""HTTP serving benchmark: invar serve vs llama.cpp's OpenAI-compatible server (llama-cpp-python).

One load generator (asyncio + httpx) drives both servers with the same workload: streaming
POST /v1/completions, Poisson arrivals at a sweep of request rates. Per request it records
TTFT (first chunk with text), TPOT ((last - first) / (n - 1)) and end-to-end latency; per rate
the achieved output throughput plus median and p99 of each latency.

Both servers are started once, on loopback, and run one after the other per rate; the order
alternates between rates so neither engine always runs first on a warm or cold machine.
"""
import argparse, asyncio, datetime, json, os, platform, random, socket, statistics, subprocess, sys, time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# English text to cut prompts from; sentences are varied so prompts differ between requests.
CORPUS = (
    "The river wound slowly through the valley, carrying the melted snow of the mountains toward "
    "the distant sea. Farmers along its banks had learned to read its moods, planting early when "
    "the water ran clear and waiting when it turned brown with spring floods. In the old town at "
    "the bend of the river, a market opened every morning before sunrise. Merchants arrived with "
    "carts of apples, bread, wool and copper pots, and the square filled with voices bargaining "
    "over prices. Children ran between the stalls while their parents argued about the weather, "
    "the harvest and the news from the capital. A teacher at the village school explained to her "
    "students how water evaporates from the ocean, forms clouds, and falls again as rain on the "
    "hills. She drew a large circle on the blackboard to show that the journey never really ends. "
    "Later that afternoon, the students walked to the bridge to measure how fast the current was "
    "moving, dropping leaves into the water and counting the seconds until they passed a marker. "
    "Scientists who study rivers use similar methods, although their instruments are far more "
    "precise. They measure the depth, the width and the speed of the flow to estimate how much "
    "water passes a given point each second. Such numbers help engineers design dams, bridges and "
    "canals that can survive the largest floods expected in a century. History records many towns "
    "that were built too close to the water and paid the price when the river rose."
).split()


def make_prompts(n, seed, lo_words=24, hi_words=96):
    """Prompts of roughly 32-128 tokens (about 1.3 tokens per English word for this tokenizer)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(lo_words, hi_words)
        start = rng.randrange(0, len(CORPUS) - k)
        out.append(" ".join(CORPUS[start:start + k]) + " Continue the story in detail:")
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"server at {url} not ready after {timeout}s")


def start_invar(model, port, threads, max_batch, log):
    cmd = [os.path.join(ROOT, "build", "invar"), "serve", "--model", model, "--host", "127.0.0.1",
           "--port", str(port), "--threads", str(threads), "--max-batch", str(max_batch)]
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    wait_ready(f"http://127.0.0.1:{port}/health", p)
    return p, cmd


def start_llama(model, port, threads, log):
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
           "--port", str(port), "--n_threads", str(threads), "--n_ctx", "2048",
           # by default a new request cuts the running stream short (after ~1 token); queue instead
           "--interrupt_requests", "False"]
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    wait_ready(f"http://127.0.0.1:{port}/v1/models", p)
    return p, cmd


async def one_request(client, url, model, prompt, max_tokens, ignore_eos, t_sched):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": True}
    if ignore_eos:
        body["ignore_eos"] = True
    t0 = time.perf_counter()
    times, usage_tokens, err = [], None, None
    try:
        async with client.stream("POST", url, json=body) as r:
            if r.status_code != 200:
                return {"error": f"HTTP {r.status_code}", "t_start": t0}
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                ev = json.loads(data)
                if ev.get("usage"):
                    usage_tokens = ev["usage"].get("completion_tokens")
                ch = ev.get("choices") or []
                if ch and ch[0].get("text"):
                    times.append(time.perf_counter())
    except (httpx.HTTPError, json.JSONDecodeError) as e:
        err = repr(e)
    t1 = time.perf_counter()
    if err or not times:
        return {"error": err or "no text", "t_start": t0}
    n = len(times)
    return {"t_start": t0, "t_end": t1, "sched_delay": t0 - t_sched,
            "ttft": times[0] - t0, "e2e": t1 - t0,
            "tpot": (times[-1] - times[0]) / (n - 1) if n > 1 else None,
            "chunks": n, "usage_tokens": usage_tokens,
            "tokens": usage_tokens if usage_tokens else n}


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, int(round(q / 100 * (len(xs) - 1)))))
    return xs[i]


async def run_rate(base, model_name, prompts, rate, max_tokens, ignore_eos, cap_s, seed):
    """Send len(prompts) requests with Poisson arrivals; stop sending after cap_s and give the
    ones in flight until cap_s + 30 s to finish."""
    rng = random.Random(seed)
    url = base + "/v1/completions"
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(timeout=httpx.Timeout(cap_s + 30), limits=limits) as client:
        t_begin = time.perf_counter()
        tasks, t_next = [], t_begin
        for p in prompts:
            if t_next - t_begin > cap_s:
                break
            delay = t_next - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(
                one_request(client, url, model_name, p, max_tokens, ignore_eos, t_next)))
            t_next += rng.expovariate(rate)
        done, pending = await asyncio.wait(tasks, timeout=max(1.0, cap_s + 30 - (time.perf_counter() - t_begin)))
        for t in pending:
            t.cancel()
        results = [t.result() for t in done]
        t_finish = time.perf_counter()
    ok = [r for r in results if "error" not in r]
    wall = (max(r["t_end"] for r in ok) - t_begin) if ok else (t_finish - t_begin)
    toks = sum(r["tokens"] for r in ok)

    def stats(key):
        xs = [r[key] for r in ok if r.get(key) is not None]
        return {"median_ms": 1000 * statistics.median(xs) if xs else None,
                "p99_ms": 1000 * pct(xs, 99) if xs else None}
    return {"rate_req_s": rate, "sent": len(tasks), "ok": len(ok),
            "errors": len(results) - len(ok) + len(pending),
            "wall_s": wall, "output_tokens": toks,
            "throughput_tok_s": toks / wall if wall > 0 else None,
            "achieved_req_s": len(ok) / wall if wall > 0 else None,
            "mean_tokens_per_req": toks / len(ok) if ok else None,
            "ttft": stats("ttft"), "tpot": stats("tpot"), "e2e": stats("e2e"),
            "requests": [{k: r.get(k) for k in ("ttft", "tpot", "e2e", "tokens", "chunks", "usage_tokens", "error")}
                         for r in results]}


def chart(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 4, figsize=(18, 4.2))
    panels = [("throughput_tok_s", None, "output tok/s"), ("ttft", "median_ms", "TTFT ms"),
              ("tpot", "median_ms", "TPOT ms"), ("e2e", "median_ms", "end-to-end ms")]
    for eng, style in (("invar", "o-"), ("llama_cpp", "s--")):
        rows = res["engines"][eng]["rates"]
        xs = [r["rate_req_s"] for r in rows]
        for a, (k, sub, lab) in zip(ax, panels):
            if sub is None:
                a.plot(xs, [r[k] for r in rows], style, label=eng)
            else:
                a.plot(xs, [r[k][sub] for r in rows], style, label=f"{eng} median")
                a.plot(xs, [r[k]["p99_ms"] for r in rows], style, alpha=0.4, label=f"{eng} p99")
            a.set_xlabel("offered request rate (req/s)")
            a.set_title(lab)
            a.set_xscale("log", base=2)
    for a in ax[1:]:
        a.set_yscale("log")
    ax[0].legend(fontsize=8)
    ax[1].legend(fontsize=7)
    fig.suptitle(f"HTTP serving, {res['workload']['model']}, 1 thread each, "
                 f"max_tokens {res['workload']['max_tokens']}, {res['machine']['cpu_count']} shared cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rates", default="0.5,1,2,4")
    ap.add_argument("--requests", type=int, default=20, help="requests per rate per engine")
    ap.add_argument("--quick", action="store_true", help="10 requests per rate")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--cap-s", type=float, default=60, help="stop sending after this per rate")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tag", default="")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    a = ap.parse_args()
    n_req = 10 if a.quick else a.requests
    rates = [float(x) for x in a.rates.split(",")]
    os.makedirs(a.out_dir, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M")
    name = f"http_{stamp}{'-' + a.tag if a.tag else ''}"
    model_name = os.path.basename(a.model)

    logs = {e: open(os.path.join("/tmp", f"{name}-{e}.log"), "w") for e in ("invar", "llama_cpp")}
    pi, pl = free_port(), free_port()
    procs = {}
    try:
        procs["invar"] = start_invar(a.model, pi, a.threads, a.max_batch, logs["invar"])
        procs["llama_cpp"] = start_llama(a.model, pl, a.threads, logs["llama_cpp"])
        bases = {"invar": f"http://127.0.0.1:{pi}", "llama_cpp": f"http://127.0.0.1:{pl}"}
        # warm-up: one request each so model pages are resident and first-request costs are excluded
        for e in bases:
            asyncio.run(run_rate(bases[e], model_name, make_prompts(1, 999), 1.0, 8, e == "invar", 10, 0))
        out = {e: [] for e in bases}
        order = ["invar", "llama_cpp"]
        for i, rate in enumerate(rates):
            prompts = make_prompts(n_req, a.seed + i)
            for e in (order if i % 2 == 0 else order[::-1]):
                r = asyncio.run(run_rate(bases[e], model_name, prompts, rate, a.max_tokens,
                                         e == "invar", a.cap_s, a.seed * 1000 + i))
                out[e].append(r)
                f = lambda d: f"{d['median_ms']:8.1f} {d['p99_ms']:8.1f}" if d["median_ms"] is not None else "       -        -"
                print(f"{e:10s} rate {rate:5.2f}  ok {r['ok']:3d}/{r['sent']:3d}  tok/s {r['throughput_tok_s'] or 0:7.1f}  "
                      f"TTFT {f(r['ttft'])}  TPOT {f(r['tpot'])}  E2E {f(r['e2e'])}  tok/req {r['mean_tokens_per_req'] or 0:.1f}",
                      flush=True)
    finally:
        for p, _ in procs.values():
            p.terminate()
        for p, _ in procs.values():
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
    import llama_cpp
    res = {
        "workload": {"model": model_name, "rates_req_s": rates, "requests_per_rate": n_req,
                     "max_tokens": a.max_tokens, "temperature": 0, "stream": True,
                     "prompt_words": "24-96 English words (~32-128 tokens)", "arrivals": "Poisson",
                     "cap_s_per_rate": a.cap_s, "ignore_eos": {"invar": True, "llama_cpp": False},
                     "load_generator": f"asyncio + httpx {httpx.__version__}"},
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
                    "note": "shared cloud VM, noisy; both servers and the load generator on the same cores"},
        "engines": {
            "invar": {"cmd": procs["invar"][1], "threads": a.threads, "max_batch": a.max_batch,
                      "rates": out["invar"]},
            "llama_cpp": {"cmd": procs["llama_cpp"][1], "threads": a.threads,
                          "version": f"llama-cpp-python {llama_cpp.__version__}",
                          "note": "llama_cpp.server serves one request at a time (no parallel slots)",
                          "rates": out["llama_cpp"]}},
        "time_utc": stamp}
    jp = os.path.join(a.out_dir, name + ".json")
    with open(jp, "w") as fh:
        json.dump(res, fh, indent=1)
    chart(res, os.path.join(a.out_dir, name + ".png"))
    print("wrote", jp, "and .png")


if __name__ == "__main__":
    main()
