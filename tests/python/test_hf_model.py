"""Hugging Face model directories (`--model DIR`) against the GGUF path and `tokenizers`.

Checkpoints are written by tools/gguf_to_hf.py with the `safetensors` and `tokenizers`
packages: the default model (weights dequantised and stored as BF16) and the synthetic
Llama (untied lm_head), Qwen2 (QKV bias) and Qwen3 (QK-norm, head_dim != n_embd/n_head)
models, with a GGUF of exactly the stored values beside each. Checked:
  * token ids (and decoded bytes) equal `tokenizers` loading the directory's tokenizer.json,
    on the tricky-string set, with special tokens parsed and not;
  * logits from the directory equal the GGUF's bit for bit, one file or sharded, and a
    directory whose Llama q/k rows were left in GGUF order differs (the rotary layout is
    really exercised);
  * generate, batch and score give the GGUF's results; serve runs from the directory;
  * qwen3_moe (the synthetic qwen3moe model, one matrix per expert as transformers writes
    it): logits equal the GGUF's bit for bit (F32, BF16), the experts are really taken by
    index (two swapped experts change the logits) and norm_topk_prob is read; generate and
    batch work; a missing or surplus expert and config keys that would make layers dense
    are refused by name;
  * broken or unsupported directories (hostile safetensors headers, wrong dtypes, tensors
    that belong nowhere, unsupported tokenizer or config features) fail with a clear error.
"""
from __future__ import annotations

import json
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import INVAR_BIN, BUILD_DIR

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tokenizer_cases as cases  # noqa: E402

gguf_to_hf = pytest.importorskip("gguf_to_hf")
pytestmark = pytest.mark.skipif(not INVAR_BIN.exists(), reason=f"{INVAR_BIN} not built")

TOKENS = "1,2,3,400,5000,19556,905,216,33,34,35,28,1085,17,9,42"
MOE_TOKENS = "1,2,3,400,3000,1956,905,216,33,34,35,28,1085,17,9,42"  # within the synthetic 4096 tokens


def run(args, stdin=None, timeout=600):
    return subprocess.run([str(INVAR_BIN), *args], input=stdin, capture_output=True, text=True, timeout=timeout)


def logits(model: Path, tmp_path: Path, tokens: str = TOKENS) -> bytes:
    out = tmp_path / f"logits-{abs(hash(str(model)))}.bin"
    p = run(["logits", "--model", str(model), "--tokens", tokens, "--out", str(out)])
    assert p.returncode == 0, p.stderr
    return out.read_bytes()


@pytest.fixture(scope="module")
def hf_default(tmp_path_factory, default_model):
    """(directory, GGUF with the same stored values) of the default model, BF16."""
    d = tmp_path_factory.mktemp("hf_default")
    gguf_to_hf.convert(str(default_model), str(d / "smollm2"), "BF16", gguf_out=str(d / "smollm2-bf16.gguf"))
    return d / "smollm2", d / "smollm2-bf16.gguf"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, synthetic_model):
    """(directory, GGUF with the same stored values) of the synthetic Qwen3 model, F32."""
    d = tmp_path_factory.mktemp("hf_tiny")
    gguf_to_hf.convert(str(synthetic_model("qwen3-Q4_1")), str(d / "qwen3"), "F32", gguf_out=str(d / "qwen3.gguf"))
    return d / "qwen3", d / "qwen3.gguf"


# ---------------------------------------------------------------- tokenizer


def invar_encode(model: Path, texts, special=True):
    helper = BUILD_DIR / "test_tokenizer"
    if not helper.exists():
        pytest.skip(f"{helper} not built")
    args = [str(helper), "--encode", str(model)] + ([] if special else ["--no-special"])
    data = "".join(t.encode("utf-8").hex() + "\n" for t in texts)
    p = subprocess.run(args, input=data, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return [[int(x) for x in line.split()] for line in p.stdout.split("\n")[:-1]]


def test_token_ids_match_tokenizers(hf_default):
    from tokenizers import Tokenizer
    d, _ = hf_default
    ref = Tokenizer.from_file(str(d / "tokenizer.json"))
    ours = invar_encode(d, cases.ALL)
    assert len(ours) == len(cases.ALL) >= 150
    bad = [(t, o) for t, o in zip(cases.ALL, ours) if o != ref.encode(t, add_special_tokens=False).ids]
    assert not bad, f"{len(bad)} mismatches, first: {bad[:3]}"
    # Special tokens as plain text (tokenizers: encode_special_tokens).
    ref.encode_special_tokens = True
    texts = cases.SPECIAL + cases.MIXED
    for t, o in zip(texts, invar_encode(d, texts, special=False)):
        assert o == ref.encode(t, add_special_tokens=False).ids, t
    # Decoding is the reference's too.
    ref.encode_special_tokens = False
    for t, o in zip(cases.ALL, ours):
        assert ref.decode(o, skip_special_tokens=False) == ref.decode(ref.encode(t, add_special_tokens=False).ids,
                                                                      skip_special_tokens=False)


def split_then_byte_level(regex):
    """A tokenizer.json pre_tokenizer: the regex split (isolated pieces), then byte-level
    mapping without its own regex, as Llama-3's and Qwen2's files write it."""
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}


@pytest.mark.parametrize("pre", ["llama3", "qwen2"])
def test_token_ids_other_pre_tokenizers(hf_default, tmp_path, pre):
    """The same vocabulary behind the Llama-3 split (with ignore_merges, as Llama-3's
    tokenizer.json has it) and the Qwen2 split: the directory maps them to invar's."""
    from tokenizers import Tokenizer
    d, _ = hf_default
    j = json.loads((d / "tokenizer.json").read_text())
    regex = gguf_to_hf.LLAMA3_REGEX if pre == "llama3" else gguf_to_hf.QWEN2_REGEX
    j["pre_tokenizer"] = split_then_byte_level(regex)
    j["model"]["ignore_merges"] = pre == "llama3"
    out = tmp_path / pre
    out.mkdir()
    (out / "tokenizer.json").write_text(json.dumps(j))
    ref = Tokenizer.from_file(str(out / "tokenizer.json"))
    ours = invar_encode(out, cases.ALL)
    bad = [(t, o) for t, o in zip(cases.ALL, ours) if o != ref.encode(t, add_special_tokens=False).ids]
    assert not bad, f"{len(bad)} mismatches, first: {bad[:3]}"


@pytest.mark.parametrize("normalizer", [
    {"type": "NFC"},                                                         # Qwen2 / Qwen3
    {"type": "Sequence", "normalizers": [{"type": "NFC"}]},
])
def test_token_ids_nfc_normalizer(hf_default, tmp_path, normalizer):
    """An NFC normalizer (with the Qwen2 split, as Qwen2's tokenizer.json): ids equal
    `tokenizers`' on strings NFC changes and on the whole tricky-string set; without the
    normalizer some of them must differ (the normalization really happens)."""
    from tokenizers import Tokenizer
    d, _ = hf_default
    j = json.loads((d / "tokenizer.json").read_text())
    j["normalizer"] = normalizer
    j["pre_tokenizer"] = split_then_byte_level(gguf_to_hf.QWEN2_REGEX)
    out = tmp_path / "nfc"
    out.mkdir()
    (out / "tokenizer.json").write_text(json.dumps(j))
    ref = Tokenizer.from_file(str(out / "tokenizer.json"))
    texts = cases.NORMALIZATION + cases.ALL
    ours = invar_encode(out, texts)
    bad = [(t, o) for t, o in zip(texts, ours) if o != ref.encode(t, add_special_tokens=False).ids]
    assert not bad, f"{len(bad)} mismatches, first: {bad[:3]}"
    j["normalizer"] = None
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "tokenizer.json").write_text(json.dumps(j))
    changed = sum(a != b for a, b in zip(invar_encode(plain, cases.NORMALIZATION), ours))
    assert changed >= len(cases.NORMALIZATION) // 2, changed
    # Bytes that are not UTF-8 pass through unnormalized, without a crash.
    helper = BUILD_DIR / "test_tokenizer"
    data = "".join(b.hex() + "\n" for b in cases.INVALID_UTF8 + [b"e\xcc\x81\xffe\xcc\x81"])
    p = subprocess.run([str(helper), "--encode", str(out)], input=data, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and len(p.stdout.split("\n")) == len(cases.INVALID_UTF8) + 2, p.stderr
    last = [int(x) for x in p.stdout.split("\n")[-2].split()]
    assert last[:1] == ref.encode("\u00e9", add_special_tokens=False).ids[:1]


# Words added to the vocabulary as ordinary tokens that no merge produces: with Llama-3's
# ignore_merges a piece that is one of them is that token, not its BPE split.
UNMERGEABLE = ["qzqzqz", "\u0120qzqzqz", "xkcdxkcd", "\u0120Zzyzx", "\u00c3\u00a9t\u00c3\u00a9s"]  # ..., "étés"


def test_gguf_llama3_ignore_merges(hf_default, tmp_path):
    """A GGUF with tokenizer.ggml.pre llama-bpe (the default model's vocabulary plus the
    UNMERGEABLE words) and the same vocabulary as a tokenizer.json with Llama-3's options
    (its split, ignore_merges true) give `tokenizers`' ids: on the words themselves, in text,
    and on the whole tricky-string set."""
    import gguf
    from tokenizers import Tokenizer
    d, _ = hf_default
    j = json.loads((d / "tokenizer.json").read_text())
    vocab = j["model"]["vocab"]
    n = len(vocab)
    assert sorted(vocab.values()) == list(range(n)) and not set(UNMERGEABLE) & set(vocab)
    vocab.update({w: n + k for k, w in enumerate(UNMERGEABLE)})
    j["model"]["ignore_merges"] = True
    j["pre_tokenizer"] = split_then_byte_level(gguf_to_hf.LLAMA3_REGEX)
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "tokenizer.json").write_text(json.dumps(j))
    ref = Tokenizer.from_file(str(hf / "tokenizer.json"))
    # The GGUF: same tokens, merges, special and unknown tokens; the pre-tokenizer name implies
    # the rest.
    tokens = sorted(vocab, key=vocab.get)
    types = [1] * len(tokens)
    for a in j["added_tokens"]:
        types[a["id"]] = 3 if a["special"] else 4
    path = tmp_path / "llama-bpe.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]])
    w.add_unk_token_id(vocab[j["model"]["unk_token"]])  # the vocabulary lacks some bytes
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    words = ["qzqzqz", " qzqzqz", "xkcdxkcd and xkcdxkcd", " Zzyzx9", "\u00e9t\u00e9s", "les \u00e9t\u00e9s!",
             "qzqzqzqzqzqz", "Qzqzqz", "<|im_start|>qzqzqz"]
    want = {w: ref.encode(w, add_special_tokens=False).ids for w in words}
    assert want["qzqzqz"] == [n] and want[" qzqzqz"] == [n + 1] and want["\u00e9t\u00e9s"] == [n + 4], want
    texts = words + cases.ALL
    for model in (path, hf):
        got = invar_encode(model, texts)
        bad = [(t, o) for t, o in zip(texts, got) if o != ref.encode(t, add_special_tokens=False).ids]
        assert not bad, f"{model.name}: {len(bad)} mismatches, first: {bad[:3]}"


def test_token_ids_match_gguf(hf_default, default_model):
    d, _ = hf_default
    assert invar_encode(d, cases.ALL) == invar_encode(default_model, cases.ALL)


# ---------------------------------------------------------------- logits


def test_default_model_logits_bitwise(hf_default, tmp_path):
    d, same_values = hf_default
    a, b = logits(d, tmp_path), logits(same_values, tmp_path)
    assert len(a) == 16 * 49152 * 4
    assert a == b


@pytest.mark.parametrize("variant,dtype,shards", [
    ("llama-output-Q4_1", "F16", 1),   # untied lm_head
    ("qwen2-Q4_1", "BF16", 2),         # QKV biases; a sharded checkpoint with its index
])
def test_synthetic_logits_bitwise(synthetic_model, tmp_path, variant, dtype, shards):
    src = synthetic_model(variant)
    d, same = tmp_path / "hf", tmp_path / "same.gguf"
    gguf_to_hf.convert(str(src), str(d), dtype, shards=shards, gguf_out=str(same))
    if shards > 1:
        assert (d / "model.safetensors.index.json").exists() and not (d / "model.safetensors").exists()
    assert logits(d, tmp_path) == logits(same, tmp_path)


def test_qwen3_logits_bitwise(tiny_dir, tmp_path):
    """QK-norm, head_dim 64 != 128/4 (the tiny directory the other tests use, F32)."""
    d, same = tiny_dir
    assert logits(d, tmp_path) == logits(same, tmp_path)


LLAMA3_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 16.0,
               "original_max_position_embeddings": 512}


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory, synthetic_model):
    """(source GGUF, its directory with Llama-3.1 rope scaling LLAMA3_ROPE, a GGUF of the same
    values with the rope_freqs.weight a converter writes for it) of the synthetic F32 Llama."""
    src = synthetic_model("llama-F32")
    d = tmp_path_factory.mktemp("hf_llama")
    gguf_to_hf.convert(str(src), str(d / "llama"), "F32", gguf_out=str(d / "llama3-rope.gguf"),
                       llama3_rope=LLAMA3_ROPE)
    return src, d / "llama", d / "llama3-rope.gguf"


def test_llama_rotary_layout_is_exercised(llama_dir, tmp_path):
    """A float model converts losslessly, so its directory (without rope scaling) equals the
    source GGUF itself; the same directory with q/k rows left in GGUF's interleaved order must not."""
    import safetensors.numpy as stn
    src = llama_dir[0]
    d = tmp_path / "hf"
    shutil.copytree(llama_dir[1], d)
    edit_json(d, "config.json", lambda j: j.update(rope_scaling=None))
    base = logits(src, tmp_path)
    assert logits(d, tmp_path) == base
    cfg = json.loads((d / "config.json").read_text())
    w = stn.load_file(str(d / "model.safetensors"))
    for name in list(w):
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg["num_attention_heads"] if "q_proj" in name else cfg["num_key_value_heads"]
            r = w[name].shape[0]
            w[name] = np.ascontiguousarray(
                w[name].reshape(heads, 2, r // heads // 2, -1).swapaxes(1, 2).reshape(w[name].shape))
    stn.save_file(w, str(d / "model.safetensors"))
    assert logits(d, tmp_path) != base


def test_llama3_rope_scaling_matches_gguf(llama_dir, tmp_path):
    """Llama-3.1 rope scaling from config.json gives the logits of a GGUF holding the same
    weights and the rope_freqs.weight tensor a converter writes for those parameters; the
    synthetic Llama's 16 frequencies (head_dim 32, theta 10^4) fall in all three bands (kept,
    blended, divided by factor), and without the scaling the logits differ."""
    src, d0, same = llama_dir
    freqs = gguf_to_hf.llama3_rope_factors(10000.0, 32, LLAMA3_ROPE)
    assert (freqs == 1).sum() >= 2 and (freqs == 8).sum() >= 2 and ((freqs > 1) & (freqs < 8)).sum() >= 2, freqs
    d = tmp_path / "hf"
    shutil.copytree(d0, d)
    scaled = logits(d, tmp_path)
    assert scaled == logits(same, tmp_path)
    assert scaled != logits(src, tmp_path)
    # transformers 5 spells it rope_parameters, theta inside.
    edit_json(d, "config.json", lambda j: j.update(rope_parameters={**j.pop("rope_scaling"), "rope_type": "llama3",
                                                                    "rope_theta": j.pop("rope_theta")}))
    assert logits(d, tmp_path) == scaled
    # Incomplete or inconsistent parameters are refused by name.
    for edit, want in [(lambda r: r.pop("low_freq_factor"), "rope_scaling llama3 needs low_freq_factor"),
                       (lambda r: r.pop("original_max_position_embeddings"),
                        "missing original_max_position_embeddings"),
                       (lambda r: r.update(high_freq_factor=0.5), "must be above low_freq_factor")]:
        edit_json(d, "config.json", lambda j: edit(j["rope_parameters"]))
        p = run(["tokenize", "--model", str(d), "hi"])
        assert p.returncode == 3 and want in p.stderr, p.stderr
        edit_json(d, "config.json", lambda j: j["rope_parameters"].update(LLAMA3_ROPE))


# ---------------------------------------------------------------- qwen3_moe


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory, synthetic_model):
    """(directory, GGUF with the same stored values) of the synthetic qwen3moe model, F32
    (a lossless conversion: the source GGUF holds the same values too)."""
    d = tmp_path_factory.mktemp("hf_moe")
    gguf_to_hf.convert(str(synthetic_model("qwen3moe-F32")), str(d / "moe"), "F32", gguf_out=str(d / "moe.gguf"))
    return d / "moe", d / "moe.gguf"


def expert(layer, e, proj):
    return f"model.layers.{layer}.mlp.experts.{e}.{proj}_proj.weight"


def test_qwen3moe_layout(moe_dir):
    d, _ = moe_dir
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_moe" and cfg["architectures"] == ["Qwen3MoeForCausalLM"]
    raw = (d / "model.safetensors").read_bytes()
    h = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    n, layers = cfg["num_experts"], cfg["num_hidden_layers"]
    names = {expert(L, e, p) for L in range(layers) for e in range(n) for p in ("gate", "up", "down")}
    assert names <= set(h) and not any("_exps" in k for k in h)
    assert h[expert(0, 0, "down")]["shape"] == [cfg["hidden_size"], cfg["moe_intermediate_size"]]
    assert h["model.layers.0.mlp.gate.weight"]["shape"] == [n, cfg["hidden_size"]]


@pytest.mark.parametrize("dtype", ["F32", "BF16"])
def test_qwen3moe_logits_bitwise(synthetic_model, moe_dir, tmp_path, dtype):
    if dtype == "F32":
        d, same = moe_dir
        lossless = logits(synthetic_model("qwen3moe-F32"), tmp_path, MOE_TOKENS)  # the source: same values
        assert logits(d, tmp_path, MOE_TOKENS) == lossless
    else:
        d, same = tmp_path / "hf", tmp_path / "same.gguf"
        gguf_to_hf.convert(str(synthetic_model("qwen3moe-F32")), str(d), dtype, gguf_out=str(same))
    assert logits(d, tmp_path, MOE_TOKENS) == logits(same, tmp_path, MOE_TOKENS)


def test_qwen3moe_experts_and_norm_are_read(moe_dir, tmp_path):
    """Controls: layer 0's experts 0 and 1 swapped (their data ranges exchanged in the header)
    change the logits, so each expert is bound by its own index; norm_topk_prob false (the
    GGUF normalises) changes them too."""
    d0, same = moe_dir
    base = logits(same, tmp_path, MOE_TOKENS)
    d = tmp_path / "swapped"
    shutil.copytree(d0, d)

    def swap(h):
        for p in ("gate", "up", "down"):
            a, b = h[expert(0, 0, p)], h[expert(0, 1, p)]
            a["data_offsets"], b["data_offsets"] = b["data_offsets"], a["data_offsets"]
    rewrite_header(d, swap)
    assert logits(d, tmp_path, MOE_TOKENS) != base
    rewrite_header(d, swap)
    assert logits(d, tmp_path, MOE_TOKENS) == base
    edit_json(d, "config.json", lambda j: j.update(norm_topk_prob=False))
    assert logits(d, tmp_path, MOE_TOKENS) != base


def test_qwen3moe_generate_batch_match_gguf(moe_dir):
    d, same = moe_dir
    gen, batch = generate_and_batch(d, 8, 5)
    assert (gen, batch) == generate_and_batch(same, 8, 5)
    assert gen.strip() and len(batch.splitlines()) == 2
    assert all("error" not in json.loads(line) for line in batch.splitlines())


def _add_tensor(name, like):
    def edit(d: Path):
        import safetensors.numpy as stn
        w = stn.load_file(str(d / "model.safetensors"))
        w[name] = np.zeros_like(w[like])
        stn.save_file(w, str(d / "model.safetensors"))
    return edit


def _rename(old, new):
    return lambda d: rewrite_header(d, lambda h: h.__setitem__(new, h.pop(old)))


def _config(**kv):
    return lambda d: edit_json(d, "config.json", lambda j: j.update(kv))


def _transposed(name):
    return lambda d: rewrite_header(d, lambda h: h[name].update(shape=h[name]["shape"][::-1]))


MOE_REFUSED = {
    "missing expert": (lambda d: rewrite_header(d, lambda h: h.pop(expert(1, 7, "down"))),
                       f"tensor {expert(1, 7, 'down')} is missing (8 experts: experts 0 to 7"),
    "expert past num_experts": (_add_tensor(expert(0, 8, "up"), expert(0, 0, "up")),
                                f"'{expert(0, 8, 'up')}' has no place in invar's qwen3moe model"),
    "expert index spelt twice": (_rename(expert(0, 1, "gate"), expert(0, "01", "gate")),
                                 f"'{expert(0, '01', 'gate')}' has no place"),
    "dense FFN in a MoE layer": (_add_tensor("model.layers.0.mlp.up_proj.weight", expert(0, 0, "up")),
                                 "'model.layers.0.mlp.up_proj.weight' has no place"),
    "missing router": (lambda d: rewrite_header(d, lambda h: h.pop("model.layers.0.mlp.gate.weight")),
                       "missing tensor model.layers.0.mlp.gate.weight (GGUF name blk.0.ffn_gate_inp.weight)"),
    "expert shape": (_transposed(expert(1, 3, "gate")),
                     f"tensor {expert(1, 3, 'gate')} has shape [128, 64] (2 dims), expected [64, 128]"),
    "fewer experts in config": (_config(num_experts=4), f"'{expert(0, 4, 'down')}' has no place"),
    "decoder_sparse_step": (_config(decoder_sparse_step=2), "decoder_sparse_step 2 makes some layers dense"),
    "mlp_only_layers": (_config(mlp_only_layers=[1]), "mlp_only_layers is not empty"),
    "mlp_only_layers type": (_config(mlp_only_layers=1), "mlp_only_layers must be a list"),
    "num_experts_per_tok": (_config(num_experts_per_tok=9), "num_experts_per_tok must be an integer in [1, 8]"),
    "num_experts": (_config(num_experts=1), "num_experts must be an integer in [2, 1024]"),
    "num_experts missing": (_config(num_experts=None), "missing num_experts"),
    "moe_intermediate_size": (_config(moe_intermediate_size=1 << 30), "moe_intermediate_size must be an integer in"),
    "norm_topk_prob": (_config(norm_topk_prob="true"), "norm_topk_prob must be true or false"),
    "shared experts": (_config(shared_expert_intermediate_size=64), "qwen3_moe has no shared experts"),
    "architectures": (_config(architectures=["Qwen3ForCausalLM"]), "is not Qwen3MoeForCausalLM"),
}


@pytest.mark.parametrize("case", sorted(MOE_REFUSED))
def test_qwen3moe_refused(moe_dir, tmp_path, case):
    edit, want = MOE_REFUSED[case]
    err = broken(moe_dir, tmp_path, edit)
    assert want in err, err


def test_experts_on_a_dense_arch_refused(tiny_dir, tmp_path):
    err = broken(tiny_dir, tmp_path, _config(num_experts=8))
    assert "num_experts is not supported for qwen3 (mixture of experts: qwen3_moe)" in err, err


# ---------------------------------------------------------------- commands


def generate_and_batch(model: Path, gen_tokens: int, batch_tokens: int) -> tuple:
    """stdout of `invar generate` on a prompt and of `invar batch` on a chat (seeded, with
    logprobs) and a plain request."""
    g = run(["generate", "--model", str(model), "--max-tokens", str(gen_tokens), "The capital of France is"])
    assert g.returncode == 0, g.stderr
    req = [{"id": "c", "messages": [{"role": "user", "content": "Name a color."}], "max_tokens": batch_tokens,
            "temperature": 0.8, "seed": 7, "logprobs": 2},
           {"id": "p", "prompt": "1, 2, 3,", "max_tokens": batch_tokens}]
    b = run(["batch", "--model", str(model)], stdin="".join(json.dumps(r) + "\n" for r in req))
    assert b.returncode == 0, b.stderr
    return g.stdout, b.stdout


def test_generate_batch_score_match_gguf(tiny_dir):
    """On the tiny Qwen3 directory (cheap to run): the same text, results and logprobs."""
    d, same = tiny_dir
    outs = {}
    for m in (d, same):
        s = run(["score", "--model", str(m), "The capital of France is", " Paris."])
        assert s.returncode == 0, s.stderr
        outs[m] = generate_and_batch(m, 12, 6) + (s.stdout,)
    assert outs[d] == outs[same]
    assert outs[d][0].strip() and len(outs[d][1].splitlines()) == 2
    assert all("error" not in json.loads(line) for line in outs[d][1].splitlines())


def test_serve_from_directory(hf_default):
    import test_server as ts
    d, _ = hf_default
    proc, port = ts.start_server("--model", str(d) + "/")
    try:
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("GET", "/v1/models")
        models = json.loads(conn.getresponse().read())
        assert [m["id"] for m in models["data"]] == ["smollm2"]
        body = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        out = json.loads(r.read())
        assert r.status == 200, out
        assert out["choices"][0]["message"]["content"]
        assert out["usage"]["completion_tokens"] > 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


# ---------------------------------------------------------------- refusals


def broken(tiny_dir, tmp_path, edit):
    d = tmp_path / "broken"
    shutil.copytree(tiny_dir[0], d)
    edit(d)
    p = run(["tokenize", "--model", str(d), "hi"])
    assert p.returncode == 3, p.stdout + p.stderr
    assert "Sanitizer" not in p.stderr and "Traceback" not in p.stderr
    return p.stderr


def rewrite_header(d: Path, fn):
    """Applies fn to the parsed safetensors header and writes it back (data unchanged)."""
    f = d / "model.safetensors"
    raw = f.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    fn(h)
    text = json.dumps(h).encode()
    text += b" " * (-len(text) % 8)
    f.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])


def edit_json(d: Path, name: str, fn):
    p = d / name
    j = json.loads(p.read_text())
    fn(j)
    p.write_text(json.dumps(j))


def first_weight(h):
    return next(k for k in h if k.endswith("q_proj.weight"))


def overlap(h):
    """Layer 1's input norm claims layer 0's bytes (same shape and dtype)."""
    a, b = (f"model.layers.{i}.input_layernorm.weight" for i in (0, 1))
    h[b]["data_offsets"] = h[a]["data_offsets"]


HOSTILE_HEADERS = {
    "huge header length": (lambda d: (d / "model.safetensors").write_bytes(
        struct.pack("<Q", 1 << 62) + (d / "model.safetensors").read_bytes()[8:]), "exceeds the 100000000-byte limit"),
    "header past the end": (lambda d: (d / "model.safetensors").write_bytes(
        struct.pack("<Q", 1 << 26) + b"{}"), "runs past the end"),
    "offsets past the end": (lambda d: rewrite_header(d, lambda h: h[first_weight(h)].update(
        data_offsets=[0, 1 << 40])), "outside the"),
    "overlapping ranges": (lambda d: rewrite_header(d, overlap), "overlapping data_offsets"),
    "size disagrees with shape": (lambda d: rewrite_header(d, lambda h: h[first_weight(h)].update(
        shape=[h[first_weight(h)]["shape"][0] + 1, h[first_weight(h)]["shape"][1]])), "needs"),
    "wrong dtype": (lambda d: rewrite_header(d, lambda h: h[first_weight(h)].update(dtype="I32")),
                    "dtype 'I32' is not supported (F32, F16, BF16)"),
    "not JSON": (lambda d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 6) + b"{oops}"), "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_HEADERS))
def test_hostile_safetensors_headers(tiny_dir, tmp_path, case):
    edit, want = HOSTILE_HEADERS[case]
    err = broken(tiny_dir, tmp_path, edit)
    assert want in err and "model.safetensors" in err, err


def _extra_tensor(d: Path):
    import safetensors.numpy as stn
    w = stn.load_file(str(d / "model.safetensors"))
    w["model.layers.0.self_attn.o_proj.bias"] = np.zeros(w["model.norm.weight"].shape, np.float32)
    stn.save_file(w, str(d / "model.safetensors"))


UNSUPPORTED = {
    "no config.json": (lambda d: (d / "config.json").unlink(), "is a directory without config.json"),
    "other model_type": (lambda d: edit_json(d, "config.json", lambda j: j.update(model_type="gemma")),
                         "unsupported model_type 'gemma'"),
    "rope scaling": (lambda d: edit_json(d, "config.json", lambda j: j.update(
        rope_scaling={"rope_type": "yarn", "factor": 4.0})), "rope scaling type 'yarn' is not supported"),
    "llama3 rope on qwen3": (lambda d: edit_json(d, "config.json", lambda j: j.update(
        rope_scaling={"rope_type": "llama3", **LLAMA3_ROPE})), "rope scaling type llama3 is for llama models"),
    "sliding window": (lambda d: edit_json(d, "config.json", lambda j: j.update(use_sliding_window=True)),
                       "use_sliding_window"),
    "vocab size": (lambda d: edit_json(d, "config.json", lambda j: j.update(vocab_size=7)), "vocab_size 7"),
    "tensor with no place": (_extra_tensor, "o_proj.bias' has no place in invar's qwen3 model"),
    "missing tensor": (lambda d: rewrite_header(d, lambda h: h.pop(first_weight(h))), "missing tensor model.layers.0.self_attn.q_proj.weight (GGUF name blk.0.attn_q"),
    "no tokenizer.json": (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json"),
    "normalizer": (lambda d: edit_json(d, "tokenizer.json", lambda j: j.update(normalizer={"type": "NFKC"})),
                   "normalizer 'NFKC' is not supported"),
    "normalizer in a sequence": (lambda d: edit_json(d, "tokenizer.json", lambda j: j.update(normalizer={
        "type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]})),
        "normalizer 'Lowercase' is not supported"),
    "normalized added token": (lambda d: edit_json(d, "tokenizer.json", lambda j: (
        j.update(normalizer={"type": "NFC"}), j["added_tokens"][0].update(normalized=True))),
        "is matched after normalization"),
    "pre-tokenizer": (lambda d: edit_json(d, "tokenizer.json", lambda j: j.update(
        pre_tokenizer={"type": "Whitespace"})), "unsupported pre_tokenizer"),
    "tokenizer model": (lambda d: edit_json(d, "tokenizer.json", lambda j: j["model"].update(type="Unigram")),
                        "model type 'Unigram' is not supported"),
    "byte fallback": (lambda d: edit_json(d, "tokenizer.json", lambda j: j["model"].update(byte_fallback=True)),
                      "byte_fallback"),
    "shard outside the directory": (lambda d: (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"x": "../model.safetensors"}})), "does not name a .safetensors file"),
}


@pytest.mark.parametrize("case", sorted(UNSUPPORTED))
def test_unsupported_directories_are_refused(tiny_dir, tmp_path, case):
    edit, want = UNSUPPORTED[case]
    err = broken(tiny_dir, tmp_path, edit)
    assert want in err, err


def test_tiny_directory_loads(tiny_dir):
    p = run(["tokenize", "--model", str(tiny_dir[0]), "hi"])
    assert p.returncode == 0, p.stderr
