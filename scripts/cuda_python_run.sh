#!/usr/bin/env bash
# The Python trainer with the engine on the GPU, in one call: tests/python/test_python_torch.py
# with INVAR_TEST_DEVICE=cuda (invar.LLM(device="cuda") samples; invar.trainer's forward gives
# the same logprobs bitwise, its backward runs the torch reference on the GPU).
# Needs a CUDA build's libinvar.so (LIB, default build-cuda/libinvar.so; LIBS an optional
# folder of shared libraries to put first on the library path, for a machine that lacks
# libcjson/libxxhash/...), python3 with torch, numpy, gguf and pytest, and TOKENIZER_SRC, a GGUF
# whose tokenizer the generated test models take (default: the default model).
# Logs go to $OUT (default ./out/cuda).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/cuda}
mkdir -p "$OUT"
LIB=${LIB:-build-cuda/libinvar.so}
[ -n "${LIBS:-}" ] && export LD_LIBRARY_PATH=$LIBS:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
INVAR_LIBRARY=$(realpath "$LIB") INVAR_TEST_DEVICE=cuda INVAR_REQUIRE_TORCH=1 \
    INVAR_MODEL=$(realpath "${TOKENIZER_SRC:-models/SmolLM2-135M-Instruct.Q4_1.gguf}") PYTHONUNBUFFERED=1 \
    timeout 500 python3 -m pytest -q -s -rs tests/python/test_python_torch.py 2>&1 | tee "$OUT/python_cuda_log.txt"
exit "${PIPESTATUS[0]}"
