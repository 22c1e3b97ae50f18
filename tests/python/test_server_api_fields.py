"""The OpenAI fields of issue 14 through the official `openai` client (docs/server.md): the
logits-processing parameters (logit_bias, penalties, min_tokens, stop_token_ids, best_of),
refusal of fields the server does not implement, and the exact edge cases (logprobs: 0,
echo alternatives, stream_options without stream, 64-bit seeds, the prompts-per-request
limit, the developer role, cached prompt tokens). The same fields in `invar batch`."""
from __future__ import annotations

import json
import signal
import subprocess

import pytest

from test_server import MODEL, MODEL_NAME, ROOT, find_bin, post_raw, start_server

openai = pytest.importorskip("openai")

MAX_PROMPTS = 130  # above the default 64: --max-prompts-per-request


@pytest.fixture(scope="module")
def server():
    if not MODEL.exists():
        pytest.skip("default model missing")
    proc, port = start_server("--threads", "2", "--max-prompts-per-request", str(MAX_PROMPTS))
    yield port
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server}/v1", api_key="none", max_retries=0, timeout=120)


def token_id(text):
    out = subprocess.run([find_bin(), "tokenize", text], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    ids = [int(x) for x in out.split()]
    assert len(ids) == 1, ids
    return ids[0]


def bad_request(fn, param=None):
    with pytest.raises(openai.BadRequestError) as ei:
        fn()
    if param is not None:
        assert ei.value.param == param, ei.value
    return ei.value


# ---- part 1: sampling parameters ------------------------------------------------------------

def test_logit_bias_forces_and_forbids(client):
    t = token_id(" banana")
    r = client.completions.create(model=MODEL_NAME, prompt="I like", max_tokens=3, logit_bias={str(t): 100})
    assert r.choices[0].text == " banana" * 3
    plain = client.completions.create(model=MODEL_NAME, prompt="I like", max_tokens=1, logprobs=0)
    first = plain.choices[0].logprobs.tokens[0]
    banned = client.completions.create(model=MODEL_NAME, prompt="I like", max_tokens=1, logprobs=0,
                                       logit_bias={str(token_id(first)): -100})
    assert banned.choices[0].logprobs.tokens[0] != first
    for bias in ({"-1": 1}, {"99999999": 1}, {"x": 1}, {str(t): 101}, {str(t): "a"}):
        bad_request(lambda: client.completions.create(model=MODEL_NAME, prompt="I", max_tokens=1, logit_bias=bias),
                    "logit_bias")


def test_stop_token_ids_and_min_tokens(client):
    t = token_id(" banana")
    r = client.completions.create(model=MODEL_NAME, prompt="I like", max_tokens=8, logit_bias={str(t): 100},
                                  extra_body={"stop_token_ids": [t]})
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 1
    short = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Say hi."}],
                                           max_tokens=60)
    assert short.choices[0].finish_reason == "stop"
    k = short.usage.completion_tokens
    longer = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Say hi."}],
                                            max_tokens=60, extra_body={"min_tokens": k + 5})
    assert longer.usage.completion_tokens >= k + 5
    forever = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Say hi."}],
                                             max_tokens=k + 3, extra_body={"ignore_eos": True})
    assert forever.usage.completion_tokens == k + 3 and forever.choices[0].finish_reason == "length"
    bad_request(lambda: client.completions.create(model=MODEL_NAME, prompt="I", max_tokens=2,
                                                  extra_body={"min_tokens": 3}), "min_tokens")


def test_penalties_change_repetitive_text(client):
    prompt = "one one one one one one one one"
    base = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=12).choices[0].text
    for kw in ({"frequency_penalty": 2.0}, {"presence_penalty": 2.0}, {"extra_body": {"repetition_penalty": 3.0}}):
        r = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=12, **kw)
        assert r.choices[0].text != base, kw
        again = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=12, **kw)
        assert again.choices[0].text == r.choices[0].text  # deterministic
    bad_request(lambda: client.completions.create(model=MODEL_NAME, prompt="x", presence_penalty=2.5),
                "presence_penalty")
    bad_request(lambda: client.completions.create(model=MODEL_NAME, prompt="x", extra_body={"repetition_penalty": 0}),
                "repetition_penalty")


def test_best_of_and_unsupported_fields(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2, n=2, best_of=2)
    assert len(r.choices) == 2
    # best_of 4, n 2: the two candidates (seeds s..s+3) with the highest mean logprob, best first
    kw = dict(model=MODEL_NAME, prompt=["Once upon a time", "The sea"], max_tokens=6, temperature=1.5, seed=7,
              logprobs=0)
    every = client.completions.create(n=4, **kw)
    best = client.completions.create(n=2, best_of=4, **kw)
    assert best.usage.completion_tokens == every.usage.completion_tokens  # every candidate ran
    for p in range(2):
        cands = every.choices[4 * p:4 * p + 4]
        mean = [sum(c.logprobs.token_logprobs) / len(c.logprobs.token_logprobs) for c in cands]
        order = sorted(range(4), key=lambda i: (-mean[i], i))[:2]
        got = best.choices[2 * p:2 * p + 2]
        assert [c.index for c in got] == [2 * p, 2 * p + 1]
        assert [c.text for c in got] == [cands[i].text for i in order]
    bad_request(lambda: client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2, n=2, best_of=1),
                "best_of")
    bad_request(lambda: client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2, best_of=2,
                                                  stream=True), "best_of")
    e = bad_request(lambda: client.completions.create(model=MODEL_NAME, prompt="Hi", suffix="!"), "suffix")
    assert "not supported" in str(e)
    e = bad_request(lambda: client.completions.create(model=MODEL_NAME, prompt="Hi",
                                                      extra_body={"frobnicate": 1}), "frobnicate")
    assert "frobnicate" in str(e)
    bad_request(lambda: client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "x"}],
                                                       response_format={"type": "json_object"}), "response_format")
    # accepted, documented: user (an end-user tag for the operator)
    assert client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=1, user="u1").choices


def test_batch_reads_the_same_fields():
    t = token_id(" banana")
    reqs = [{"prompt": "I like", "max_tokens": 8, "logit_bias": {str(t): 100}, "stop_token_ids": [t]},
            {"prompt": "I like", "max_tokens": 3, "frequency_penalty": 1.0, "presence_penalty": 0.5,
             "repetition_penalty": 1.2, "min_tokens": 3, "ignore_eos": True, "seed": 18446744073709551615},
            {"prompt": "I like", "echo": True}, {"prompt": "I like", "logit_bias": {"-3": 1}}]
    p = subprocess.run([find_bin(), "batch", "--threads", "2"], input="".join(json.dumps(r) + "\n" for r in reqs),
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    out = [json.loads(x) for x in p.stdout.splitlines()]
    assert out[0]["token_ids"] == [t] and out[0]["finish_reason"] == "stop"
    assert len(out[1]["token_ids"]) == 3
    assert "echo" in out[2]["error"]
    assert "logit_bias" in out[3]["error"]


# ---- part 2: edge cases ---------------------------------------------------------------------

def test_logprobs_zero_gives_the_sampled_token(client):
    r = client.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=3, logprobs=0)
    lp = r.choices[0].logprobs
    assert len(lp.top_logprobs) == 3
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert top == {tok: val}
    r2 = client.completions.create(model=MODEL_NAME, prompt="The sky is", max_tokens=3, logprobs=2)
    for tok, top in zip(r2.choices[0].logprobs.tokens, r2.choices[0].logprobs.top_logprobs):
        assert 2 <= len(top) <= 3 and tok in top


def test_echo_reports_prompt_alternatives(client):
    r = client.completions.create(model=MODEL_NAME, prompt="The quick brown fox", max_tokens=2, echo=True, logprobs=3)
    lp = r.choices[0].logprobs
    n_prompt = r.usage.prompt_tokens
    assert lp.top_logprobs[0] is None and lp.token_logprobs[0] is None  # nothing predicts the first token
    for k in range(1, n_prompt):
        top = lp.top_logprobs[k]
        assert isinstance(top, dict) and 3 <= len(top) <= 4, (k, top)
        assert top[lp.tokens[k]] == lp.token_logprobs[k]
        assert max(top.values()) >= lp.token_logprobs[k]
    zero = client.completions.create(model=MODEL_NAME, prompt="The quick brown fox", max_tokens=1, echo=True,
                                     logprobs=0).choices[0].logprobs
    assert zero.top_logprobs[0] is None
    assert all(zero.top_logprobs[k] == {zero.tokens[k]: zero.token_logprobs[k]} for k in range(1, n_prompt))


def test_stream_options_needs_stream(client):
    bad_request(lambda: client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=1,
                                                  stream_options={"include_usage": True}), "stream_options")
    chunks = list(client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[-1].usage.completion_tokens == 2


def test_seed_is_an_exact_u64(client, server):
    def text(seed):
        st, body = post_raw(server, "/v1/completions",
                            '{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 1.5, "seed": %s}' % seed)
        assert st == 200, body
        return json.loads(body)["choices"][0]["text"]
    assert text(2 ** 53) != text(2 ** 53 + 1)  # one double apart from each other: distinct seeds
    assert text(2 ** 53 + 1) == text(2 ** 53 + 1)
    r = client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2, temperature=1.0, seed=2 ** 64 - 1)
    assert r.choices[0].text
    for bad in (2 ** 64, -1):
        bad_request(lambda: client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=1, seed=bad), "seed")
    for bad in ("1.5", "1e3", '"7"'):
        st, body = post_raw(server, "/v1/completions", '{"prompt": "Hi", "max_tokens": 1, "seed": %s}' % bad)
        assert st == 400 and json.loads(body)["error"]["param"] == "seed", body


def test_prompts_per_request_limit(client):
    r = client.completions.create(model=MODEL_NAME, prompt=["Hi"] * MAX_PROMPTS, max_tokens=1)
    assert len(r.choices) == MAX_PROMPTS
    e = bad_request(lambda: client.completions.create(model=MODEL_NAME, prompt=["Hi"] * (MAX_PROMPTS + 1),
                                                      max_tokens=1), "prompt")
    assert str(MAX_PROMPTS) in str(e)


def test_developer_role_is_system(client):
    def chat(role):
        return client.chat.completions.create(
            model=MODEL_NAME, max_tokens=8, logprobs=True,
            messages=[{"role": role, "content": "Answer in French."}, {"role": "user", "content": "Hello"}])
    a, b = chat("developer"), chat("system")
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.prompt_tokens == b.usage.prompt_tokens
    assert [t.logprob for t in a.choices[0].logprobs.content] == [t.logprob for t in b.choices[0].logprobs.content]


def test_cached_tokens_reported(client):
    prompt = "A unique prefix for the cache test: " + " ".join(f"w{i}" for i in range(40))
    first = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=1)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    second = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=1)
    cached = second.usage.prompt_tokens_details.cached_tokens
    n = second.usage.prompt_tokens
    assert cached > 0 and cached % 16 == 0 and cached < n
    assert second.choices[0].text == first.choices[0].text
    chunks = list(client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=1, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == cached
