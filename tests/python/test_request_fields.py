"""`invar batch` and `invar serve` read request fields through one decoder (src/request/):
the same chat or prompt gives the same tokens and logprobs in both, and the fields the two
once read by different rules (message content parts, null content, seed, top_k, ranges,
parse_special, token-id prompts) are accepted or refused alike, with the same message."""
from __future__ import annotations

import json
import signal
import subprocess

import pytest

from test_server import MODEL, ROOT, find_bin, post_raw, start_server


@pytest.fixture(scope="module")
def server():
    if not MODEL.exists():
        pytest.skip("default model missing")
    proc, port = start_server("--threads", "2")
    yield port
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def batch(reqs):
    p = subprocess.run([find_bin(), "batch", "--model", str(MODEL), "--threads", "2"],
                       input="".join(json.dumps(r) + "\n" for r in reqs), capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    assert p.returncode in (0, 1), p.stderr
    return [json.loads(x, parse_float=str) for x in p.stdout.splitlines()]


def user(content):
    return [{"role": "user", "content": content}]


CHATS = [  # (request, accepted)
    ({"messages": user("Name a colour."), "max_tokens": 6}, True),
    ({"messages": user([{"type": "text", "text": "Name a "}, {"type": "text", "text": "colour."}]),
      "max_tokens": 6}, True),
    ({"messages": user("Hi"), "max_tokens": 5, "top_k": -1, "temperature": 0.7, "seed": 11}, True),
    ({"messages": user("Hi"), "max_completion_tokens": 3, "max_tokens": 9}, True),
    ({"messages": user(None), "max_tokens": 2}, False),
    ({"messages": [{"role": "user"}], "max_tokens": 2}, False),
    ({"messages": user([{"type": "image_url", "image_url": {"url": "x"}}])}, False),
    ({"messages": user([{"text": "a part without a type"}])}, False),
    ({"messages": user("Hi"), "seed": -1}, False),
    ({"messages": user("Hi"), "top_k": -2}, False),
    ({"messages": user("Hi"), "temperature": 101}, False),
    ({"messages": user("Hi"), "top_p": 0}, False),
    ({"messages": user("Hi"), "max_tokens": 0}, False),
    ({"messages": user("Hi"), "parse_special": False}, False),
    ({"messages": user("Hi"), "prompt": "Hi"}, False),
]


def test_chat_fields_batch_equals_server(server):
    results = batch([r for r, _ in CHATS])
    for (req, accepted), res in zip(CHATS, results):
        status, text = post_raw(server, "/v1/chat/completions", req)
        body = json.loads(text)
        if not accepted:
            assert res["finish_reason"] == "error", (req, res)
            assert status == 400, (req, text)
            assert res["error"] == body["error"]["message"], (req, res, body)
            continue
        assert "error" not in res and status == 200, (req, res, text)
        choice = body["choices"][0]
        assert choice["message"]["content"] == res["text"], req
        assert body["usage"]["prompt_tokens"] == res["prompt_tokens"], req
    # Content parts are the joined string, token for token.
    assert results[0]["token_ids"] == results[1]["token_ids"]
    assert len(results[3]["token_ids"]) <= 3  # max_completion_tokens wins


def test_prompt_fields_batch_equals_server(server):
    reqs = [
        {"prompt": "The capital of France is", "max_tokens": 6, "logprobs": 2},
        {"prompt": [1, 504, 3575, 282, 4649, 314], "max_tokens": 6, "logprobs": 0},  # token ids: batch too
        {"prompt": "<|im_start|>", "parse_special": False, "max_tokens": 2, "logprobs": 0},
        {"prompt": "x", "seed": 1e300},
        {"prompt": "x", "min_p": 1.5},
        {"prompt": ["a", "b"]},  # several prompts: the server only
    ]
    results = batch(reqs)
    for k, (req, res) in enumerate(zip(reqs, results)):
        status, text = post_raw(server, "/v1/completions", req)
        body = json.loads(text, parse_float=str)
        if k >= 3:
            if k == 5:
                assert status == 200 and len(body["choices"]) == 2, text
                assert res["finish_reason"] == "error" and "token ids" in res["error"], res
                continue
            assert status == 400 and res["error"] == body["error"]["message"], (req, res, text)
            continue
        assert status == 200 and "error" not in res, (req, res, text)
        lp = body["choices"][0]["logprobs"]["token_logprobs"]
        assert lp == res["logprobs"][:len(lp)], req  # the same float32 bits, printed alike
        assert body["usage"]["prompt_tokens"] == res["prompt_tokens"], req
