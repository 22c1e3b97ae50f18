"""Compares invar's tokenizer and chat templates with Hugging Face references.

invar is driven through the line-mode helper built into the test_tokenizer binary
(hex in, ids/hex out). References:
  * transformers loading the tokenizer straight from the GGUF file;
  * the same vocabulary and merges in a `tokenizers` pipeline with the pre-tokenizer the
    original model uses (SmolLM2's tokenizer.json: Digits(individual_digits=True) then
    ByteLevel). transformers' GGUF converter drops the Digits step, so the two differ on
    some strings with numbers; invar follows the original model;
  * Python `regex` and `tokenizers` (Oniguruma) running the split regexes themselves;
  * jinja2 rendering the GGUF's own tokenizer.chat_template.
Environment: INVAR_BUILD_DIR (default <repo>/build), INVAR_MODEL.
"""
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tokenizer_cases as cases  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

BUILD_DIR = Path(os.environ.get("INVAR_BUILD_DIR", str(Path(__file__).resolve().parents[2] / "build")))
MODEL = Path(os.environ.get("INVAR_MODEL", str(Path(__file__).resolve().parents[2] / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")))
BINARY = BUILD_DIR / "test_tokenizer"

GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
              r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_PAT = LLAMA3_PAT.replace(r"\p{N}{1,3}", r"\p{N}")

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant"
    "<|end_header_id|>\n\n' }}{% endif %}")
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def _need_binary():
    if not BINARY.exists():
        pytest.skip(f"{BINARY} not built (set INVAR_BUILD_DIR to the cmake build dir)")
    if not MODEL.exists():
        pytest.skip(f"model {MODEL} missing (set INVAR_MODEL)")


def run_helper(args, lines):
    """Runs the helper with one request per line; returns one response line per request."""
    _need_binary()
    proc = subprocess.run([str(BINARY), *args], input="".join(l + "\n" for l in lines),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("\n")[:-1]
    assert len(out) == len(lines), proc.stderr
    return out


def invar_encode(texts, special=True):
    data = [t.encode("utf-8") if isinstance(t, str) else t for t in texts]
    args = ["--encode", str(MODEL)] + ([] if special else ["--no-special"])
    out = run_helper(args, [d.hex() for d in data])
    assert all(not o.startswith("ERR") for o in out)
    return [[int(x) for x in o.split()] for o in out]


def invar_decode(id_lists):
    out = run_helper(["--decode", str(MODEL)], [" ".join(map(str, ids)) for ids in id_lists])
    return [bytes.fromhex(o) for o in out]


def invar_split(pre, texts):
    out = run_helper(["--split", pre], [t.encode("utf-8").hex() for t in texts])
    return [[bytes.fromhex(p).decode("utf-8") for p in o.split()] for o in out]


# ---------------------------------------------------------------- references


def _load_transformers_tokenizer():
    os.environ["HF_HUB_OFFLINE"] = "1"
    transformers = pytest.importorskip("transformers")
    try:
        return transformers.AutoTokenizer.from_pretrained(str(MODEL.parent), gguf_file=MODEL.name)
    except ImportError:
        # transformers insists on torch before reading GGUF metadata, though the tokenizer
        # path never uses it; pretend it is there (test-only).
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
        gguf_utils.is_torch_available = lambda: True
        return transformers.AutoTokenizer.from_pretrained(str(MODEL.parent), gguf_file=MODEL.name)


@pytest.fixture(scope="module")
def hf_gguf():
    _need_binary()
    return _load_transformers_tokenizer()


def _gguf_str(key):
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(str(MODEL))
    field = reader.fields[key]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


@pytest.fixture(scope="module")
def hf_original(hf_gguf):
    """transformers' GGUF tokenizer with the model's own pre-tokenizer restored."""
    from tokenizers import Tokenizer, pre_tokenizers
    pre = _gguf_str("tokenizer.ggml.pre")
    tok = Tokenizer.from_str(hf_gguf.backend_tokenizer.to_str())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=True)
    if pre in ("smollm", "starcoder", "refact"):
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        assert pre in ("gpt2", "default"), f"no reference pre-tokenizer for {pre}"
        tok.pre_tokenizer = byte_level
    return tok


# ---------------------------------------------------------------- tokenizer ids


def test_case_count():
    assert len(cases.ALL) >= 150


def test_ids_match_original_tokenizer(hf_original):
    ours = invar_encode(cases.ALL)
    bad = []
    for text, ids in zip(cases.ALL, ours):
        want = hf_original.encode(text, add_special_tokens=False).ids
        if ids != want:
            bad.append((text, ids, want))
    assert not bad, f"{len(bad)} mismatches, first: {bad[:3]}"


def test_ids_match_transformers_gguf_without_digits(hf_gguf):
    """transformers' own GGUF tokenizer, on every case where its missing Digits step
    cannot matter (no numeric characters)."""
    texts = [t for t in cases.ALL if not any(unicodedata.category(c)[0] == "N" for c in t)]
    assert len(texts) > 100
    ours = invar_encode(texts)
    bad = [(t, o, hf_gguf.encode(t, add_special_tokens=False)) for t, o in zip(texts, ours)
           if o != hf_gguf.encode(t, add_special_tokens=False)]
    assert not bad, f"{len(bad)} mismatches, first: {bad[:3]}"


def test_ids_without_special_parsing(hf_original):
    """parse_special=false: markup is plain text (HF: encode_special_tokens=True)."""
    from tokenizers import Tokenizer
    plain = Tokenizer.from_str(hf_original.to_str())
    plain.encode_special_tokens = True
    texts = cases.SPECIAL + cases.MIXED
    ours = invar_encode(texts, special=False)
    for text, ids in zip(texts, ours):
        assert ids == plain.encode(text, add_special_tokens=False).ids, text


@pytest.fixture(scope="module")
def representable():
    """Bytes that have a token of their own (SmolLM2's vocabulary lacks 21 of them, e.g.
    0x1D and 0xFF; those become <unk>, as in the references)."""
    single = invar_encode([bytes([b]) for b in range(256)])
    back = invar_decode(single)
    return {b for b in range(256) if back[b] == bytes([b])}


def test_decode_round_trip(representable):
    ids = invar_encode(cases.ALL)
    back = invar_decode(ids)
    checked = 0
    for text, b in zip(cases.ALL, back):
        raw = text.encode("utf-8")
        if all(x in representable for x in raw):
            assert b == raw, text
            checked += 1
    assert checked > 150


def test_decode_matches_reference(hf_original):
    texts = cases.UNICODE + cases.EMOJI + cases.CODE
    ids = [hf_original.encode(t, add_special_tokens=False).ids for t in texts]
    assert [b.decode("utf-8") for b in invar_decode(ids)] == texts


def test_invalid_utf8_robust(representable):
    """No reference can take invalid UTF-8; invar must not crash, and bytes that have a
    token must come back exactly (the rest become <unk>)."""
    ours = invar_encode(cases.INVALID_UTF8)
    ours_plain = invar_encode(cases.INVALID_UTF8, special=False)
    for raw, b, b2 in zip(cases.INVALID_UTF8, invar_decode(ours), invar_decode(ours_plain)):
        if all(x in representable for x in raw):
            assert b == raw and b2 == raw, raw
    # Random bytes, restricted to representable ones, round-trip exactly.
    import random
    rng = random.Random(7)
    rep = sorted(representable)
    blobs = [bytes(rng.choice(rep) for _ in range(rng.randint(0, 300))) for _ in range(100)]
    assert invar_decode(invar_encode(blobs)) == blobs


# ---------------------------------------------------------------- pre-tokenizer splits

SPLIT_TEXTS = cases.ALL + [
    "Hello WORLD'S 12345 ++\n\n   x", "x123 \n\tfoo'LL", "'ſ 'ſt 'Ll 'rE", "a\n\n  b",
    "  \n\t x", "foo!!\n\nbar", "1234567", "\r\n\r\n", " \r\n x", "\u00a0\nx", "\t\n ",
]


def _onig_split(pattern, text, digits=False):
    from tokenizers import Regex, pre_tokenizers
    steps = [pre_tokenizers.Split(Regex(pattern), behavior="isolated")]
    if digits:
        steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
    pt = pre_tokenizers.Sequence(steps)
    return [p for p, _ in pt.pre_tokenize_str(text)]


@pytest.mark.parametrize("pre,pattern,digits", [
    ("gpt2", GPT2_PAT, False), ("smollm", GPT2_PAT, True),
    ("llama3", LLAMA3_PAT, False), ("qwen2", QWEN2_PAT, False)])
def test_split_matches_regex(pre, pattern, digits):
    regex = pytest.importorskip("regex")
    ours = invar_split(pre, SPLIT_TEXTS)
    for text, pieces in zip(SPLIT_TEXTS, ours):
        assert pieces == _onig_split(pattern, text, digits), (pre, text)
        if not digits:
            assert pieces == regex.findall(pattern, text), (pre, text)


def _all_chars_texts():
    """Every assigned code point (except surrogates) next to letters, digits, spaces and
    punctuation, so any class difference shows up in the split."""
    texts, cur = [], []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or unicodedata.category(chr(cp)) == "Cn":
            continue
        c = chr(cp)
        cur.append(f"a{c}1{c} {c}!{c}{c}'")
        if len(cur) == 512:
            texts.append("".join(cur))
            cur = []
    texts.append("".join(cur))
    return texts


@pytest.mark.parametrize("pre,pattern", [("gpt2", GPT2_PAT), ("llama3", LLAMA3_PAT)])
def test_split_all_code_points(pre, pattern):
    """Class tables against Oniguruma (what tokenizers runs) over all of Unicode."""
    texts = _all_chars_texts()
    ours = invar_split(pre, texts)
    bad = [t for t, o in zip(texts, ours) if o != _onig_split(pattern, t)]
    assert not bad, f"{len(bad)} chunks differ, first: {bad[0][:200]!r}"


# ---------------------------------------------------------------- chat templates


def _jinja_render(template, messages, add_generation_prompt):
    jinja2 = pytest.importorskip("jinja2")
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, bos_token="", eos_token="",
                                            add_generation_prompt=add_generation_prompt)


def _chat_lines(convs):
    lines = []
    for gen in (False, True):
        for conv in convs:
            items = [f"{m['role']}={m['content'].encode('utf-8').hex()}" for m in conv]
            lines.append(" ".join([str(int(gen))] + items))
    return lines


def _check_chat(args, template):
    out = run_helper(args, _chat_lines(cases.CONVERSATIONS))
    k = 0
    for gen in (False, True):
        for conv in cases.CONVERSATIONS:
            assert not out[k].startswith("ERR"), out[k]
            assert bytes.fromhex(out[k]).decode("utf-8") == _jinja_render(template, conv, gen), conv
            k += 1


def test_chat_matches_gguf_template():
    _need_binary()
    _check_chat(["--chat", str(MODEL)], _gguf_str("tokenizer.chat_template"))


@pytest.mark.parametrize("template", [LLAMA3_TEMPLATE, QWEN2_TEMPLATE], ids=["llama3", "qwen2"])
def test_chat_other_templates(template, tmp_path):
    path = tmp_path / "template.jinja"
    path.write_text(template)
    _check_chat(["--chat-template", str(path)], template)


def _reference_chat_ids(tok, plain, template, conv, gen):
    """The chat's ids with special tokens parsed only in the template's markup: rendered
    with placeholder contents, split at the special tokens found there, contents put back
    into the plain runs, each run encoded with special parsing off."""
    import re
    marks = [f"\x01{i}\x02" for i in range(len(conv))]
    text = _jinja_render(template, [dict(m, content=marks[i]) for i, m in enumerate(conv)], gen)
    specials = {t.content: i for i, t in tok.get_added_tokens_decoder().items() if t.special}
    pattern = "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True))
    ids, pos = [], 0
    for m in list(re.finditer(pattern, text)) + [None]:
        run = text[pos:m.start() if m else len(text)]
        for i, mark in enumerate(marks):
            run = run.replace(mark, conv[i]["content"])
        ids += plain.encode(run, add_special_tokens=False).ids if run else []
        if m:
            ids.append(specials[m.group()])
            pos = m.end()
    return ids


def test_chat_ids_parse_special_tokens_in_markup_only(hf_original):
    """Issue 13 #12: an ordinary chat gets the ids of its whole rendered text (what HF's
    apply_chat_template gives); text in contents that spells a special token stays text."""
    from tokenizers import Tokenizer
    plain = Tokenizer.from_str(hf_original.to_str())
    plain.encode_special_tokens = True
    template = _gguf_str("tokenizer.chat_template")
    convs = cases.CONVERSATIONS + cases.CHAT_INJECTIONS
    out = run_helper(["--chat-ids", str(MODEL)], _chat_lines(convs))
    k = 0
    for gen in (False, True):
        for conv in convs:
            ours = [int(x) for x in out[k].split()]
            k += 1
            assert ours == _reference_chat_ids(hf_original, plain, template, conv, gen), conv
            if conv in cases.CONVERSATIONS:
                whole = hf_original.encode(_jinja_render(template, conv, gen), add_special_tokens=False).ids
                assert ours == whole, conv
            else:  # as many special tokens as the same chat with empty contents: none forged
                special = {i for i, t in hf_original.get_added_tokens_decoder().items() if t.special}
                empty = [dict(m, content="") for m in conv]
                markup = _reference_chat_ids(hf_original, plain, template, empty, gen)
                assert sum(i in special for i in ours) == sum(i in special for i in markup), conv


def test_chat_unknown_template(tmp_path):
    path = tmp_path / "template.jinja"
    path.write_text("{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}")
    out = run_helper(["--chat-template", str(path)], ["1 user=6869"])
    assert out[0].startswith("ERR") and "unrecognised" in out[0]
