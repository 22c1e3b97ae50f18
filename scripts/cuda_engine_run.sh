#!/usr/bin/env bash
# The GPU engine on a Hopper GPU, in one call: kernel tests, the engine invariance suite
# (tests/cuda/engine/test_cuda_engine.c) on the default model and on generated models of
# every architecture, logits against Hugging Face transformers, and the CLI end to end.
# Logs go to $OUT (default ./out/cuda).
#
# Binaries come from a CMake build with -DINVAR_CUDA=ON (scripts/build.sh -DINVAR_CUDA=ON
# -B build-cuda where its libraries are installed); BIN names the folder holding invar,
# test_cuda_engine and the test_cuda_* kernel tests (default build-cuda), LIBS an optional
# folder of shared libraries to put first on the library path (for a machine that lacks
# libcjson/libxxhash/libmicrohttpd). Python: numpy, torch, transformers and gguf.
# Usage: scripts/cuda_engine_run.sh [kernels] [sanitize|memcheck|racecheck] [engine] [hf] [hf8b] [cli] [dsv2lite] | all
# (default: all; dsv2lite, the DeepSeek-V2-Lite-shaped file, only when named)
# ("cli" also runs `invar serve --device cuda` under concurrent clients: serve_check.py)
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/cuda}
BIN=${BIN:-build-cuda}
MODEL=${INVAR_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
GEN=${GEN:-/tmp/invar-gen-models}
mkdir -p "$OUT" "$GEN"
[ -n "${LIBS:-}" ] && export LD_LIBRARY_PATH=$LIBS:${LD_LIBRARY_PATH:-}
# cuBLAS: the toolkit's, else the one PyTorch's wheels bring.
CUBLAS_PIP=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:${CUBLAS_PIP:-}
TOKENIZER_SRC=${TOKENIZER_SRC:-$MODEL}
have_default() { [ -f "$MODEL" ] || { echo "$MODEL absent: default-model steps skipped"; return 1; }; }
what=${*:-all}
want() { [[ ( " $what " == *" all "* && $1 != dsv2lite ) || " $what " == *" $1 "* ]]; }
status=0
step() { # name command...: runs, logs, records failure
    local name=$1
    shift
    echo "== $name =="
    "$@" 2>&1 | tee -a "$OUT/steps.log"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" = 77 ]; then echo "$name: skipped (no device)";
    elif [ "$rc" != 0 ]; then echo "$name: FAILED (rc $rc)"; status=1; fi
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
[ -f "$MODEL" ] && sha256sum "$MODEL"

if want kernels; then
    for t in test_cuda_gemm test_cuda_rows test_cuda_attention test_cuda_mla test_cuda_moe test_cuda_sampler; do step "$t" timeout 300 "$BIN/$t"; done
fi

# compute-sanitizer on the kernel tests' small mode (INVAR_CUDA_TEST_SMALL=1): memcheck with
# leak checking; racecheck on shared memory in the smaller mode 2 (it is ~100x slower per
# launch). "sanitize" runs both; "memcheck" or "racecheck" one.
if want sanitize || want memcheck; then
    for t in test_cuda_rows test_cuda_attention test_cuda_mla test_cuda_moe test_cuda_sampler test_cuda_gemm; do
        step "memcheck-$t" env INVAR_CUDA_TEST_SMALL=1 timeout 300 compute-sanitizer --tool memcheck --leak-check full \
            --error-exitcode 3 "$BIN/$t"
    done
fi
if want sanitize || want racecheck; then
    for t in test_cuda_rows test_cuda_sampler test_cuda_gemm test_cuda_attention test_cuda_mla; do
        step "racecheck-$t" env INVAR_CUDA_TEST_SMALL=2 timeout 300 compute-sanitizer --tool racecheck \
            --error-exitcode 3 "$BIN/$t"
    done
fi

# Generated models: every architecture, head_dim 64 and 128 (Llama-3-8B's head layout),
# float and quantised types, tied and separate output heads.
gen() { # name arch type shape [extra]
    [ -f "$GEN/$1.gguf" ] || python3 tools/make_tiny_model.py --tokenizer-from "$TOKENIZER_SRC" --arch "$2" --type "$3" \
        --shape "$4" "${@:5}" --out "$GEN/$1.gguf" >/dev/null || { echo "cannot generate $1"; status=1; }
}
# Mixture of experts and MLA (docs/cuda.md): qwen3moe on the hd64 shape; deepseek2's tiny
# shape V2-Lite-like (softmax routing, no q_lora, 2 shared experts) and V3-like (sigmoid,
# groups, correction bias, q_lora, 1 shared expert).
GEN_MODELS=${GEN_MODELS:-"llama-hd64-q4_1 qwen2-hd64-q8_0 qwen3-hd64-bf16 llama-hd128-f16 qwen3-hd128-q4_k qwen2-hd128-q6_k qwen3moe-hd64-bf16 deepseek2-lite-q8_0 deepseek2-v3-bf16"}
if want engine || want hf; then
    gen llama-hd64-q4_1 llama Q4_1 gpu-hd64
    gen qwen2-hd64-q8_0 qwen2 Q8_0 gpu-hd64 --separate-output
    gen qwen3-hd64-bf16 qwen3 BF16 gpu-hd64
    gen llama-hd128-f16 llama F16 gpu-hd128 --separate-output
    gen qwen3-hd128-q4_k qwen3 Q4_K gpu-hd128
    gen qwen2-hd128-q6_k qwen2 Q6_K gpu-hd128
    gen qwen3moe-hd64-bf16 qwen3moe BF16 gpu-hd64
    gen deepseek2-lite-q8_0 deepseek2 Q8_0 tiny
    gen deepseek2-v3-bf16 deepseek2 BF16 tiny --gating sigmoid --q-lora 64
fi

if want engine; then
    have_default && step engine-default timeout 500 "$BIN/test_cuda_engine" "$MODEL"
    for g in $GEN_MODELS; do step "engine-$g" timeout 300 "$BIN/test_cuda_engine" "$GEN/$g.gguf" --quick; done
    moe=()
    for g in $GEN_MODELS; do [[ $g == qwen3moe* || $g == deepseek2* ]] && moe+=("$GEN/$g.gguf"); done
    [ ${#moe[@]} -gt 0 ] && step cpu-gpu-logits timeout 300 python3 tests/cuda/engine/cpu_gpu_logits.py "$BIN/invar" \
        "$OUT/cpu_gpu_logits.json" "${moe[@]}"
fi

# DeepSeek-V2-Lite's full shape (27 layers, 64 routed experts of 1408, 6 used, 2 shared, MLA
# kv_lora 512; random Q4_K weights, bf16 on the GPU: 31 GB): the CLI, GPU vs CPU logits, the
# engine benchmark (bench_engine: prefill and decode tokens/s, invariant vs cuBLAS GEMMs).
if want dsv2lite; then
    DS=${DS:-/dev/shm/invar-dsv2lite-q4_k.gguf}
    [ -f "$DS" ] || python3 tools/make_tiny_model.py --tokenizer-from "$TOKENIZER_SRC" --arch deepseek2 --type Q4_K \
        --shape deepseek-v2-lite --out "$DS" >/dev/null || { echo "cannot generate $DS"; status=1; }
    step cli-generate-dsv2lite timeout 300 "$BIN/invar" generate --device cuda --model "$DS" --max-tokens 16 "The sea is"
    step cpu-gpu-logits-dsv2lite timeout 500 python3 tests/cuda/engine/cpu_gpu_logits.py "$BIN/invar" \
        "$OUT/cpu_gpu_logits_dsv2lite.json" "$DS"
    step bench-dsv2lite timeout 500 "$BIN/bench_engine" "$DS" "$OUT/engine_bench_dsv2lite.json"
fi

if want hf; then
    models=()
    [ -f "$MODEL" ] && models+=("$MODEL")
    # transformers' classes here are the dense ones: MoE / MLA files are checked against the
    # CPU engine instead (test_cuda_engine's accuracy check).
    for g in $GEN_MODELS; do [[ $g == qwen3moe* || $g == deepseek2* ]] || models+=("$GEN/$g.gguf"); done
    step hf-reference env PYTHONUNBUFFERED=1 timeout 400 python3 tests/cuda/engine/hf_reference.py "$BIN/invar" \
        "$OUT/hf_reference.json" "${models[@]}"
fi

# The full Llama-3-8B shape (tools/make_bench_model.py, random bf16) against transformers.
if want hf8b; then
    B8=/dev/shm/invar-bench-llama3-8b-bf16-ctx16k.gguf
    [ -f "$B8" ] || python3 tools/make_bench_model.py --tokenizer-from "$TOKENIZER_SRC" --out "$B8" >/dev/null
    step hf-reference-8b env PYTHONUNBUFFERED=1 timeout 500 python3 tests/cuda/engine/hf_reference.py "$BIN/invar" \
        "$OUT/hf_reference_8b.json" "$B8"
    # The CLI and the server on the 8B-shaped file (random weights: the text is noise).
    step cli-generate-8b "$BIN/invar" generate --device cuda --model "$B8" --max-tokens 16 "The sea is"
    step serve-8b env PYTHONUNBUFFERED=1 timeout 300 python3 tests/cuda/engine/serve_check.py "$BIN/invar" "$B8"
fi

if want cli && have_default; then
    step cli-generate "$BIN/invar" generate --device cuda --model "$MODEL" --max-tokens 48 --chat \
        "Write a haiku about the sea."
    step cli-demo "$BIN/invar" demo --device cuda --model "$MODEL"
    step serve env PYTHONUNBUFFERED=1 timeout 300 python3 tests/cuda/engine/serve_check.py "$BIN/invar" "$MODEL"
fi

echo "status $status"
exit $status
