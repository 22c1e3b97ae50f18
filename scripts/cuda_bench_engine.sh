#!/usr/bin/env bash
# The end-to-end GPU benchmark in one call: writes the Llama-3-8B-shaped bf16 model
# (tools/make_bench_model.py, into /dev/shm when it has room), runs bench_engine (invar,
# invariant and cuBLAS GEMMs) and the PyTorch fast path (bench/cuda/engine/torch_e2e.py) on
# the same shapes, one after the other on the same GPU. JSON to $OUT; plot with
# bench/cuda/engine/plot.py. BIN and LIBS as in scripts/cuda_engine_run.sh.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/cuda}
BIN=${BIN:-build-cuda}
TOKENIZER_SRC=${TOKENIZER_SRC:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
mkdir -p "$OUT"
[ -n "${LIBS:-}" ] && export LD_LIBRARY_PATH=$LIBS:${LD_LIBRARY_PATH:-}
CUBLAS_PIP=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:${CUBLAS_PIP:-}
dir=/dev/shm
[ "$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1)" -gt 20 ] 2>/dev/null || dir=/tmp
M=$dir/invar-bench-llama3-8b-bf16-ctx16k.gguf
status=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
t0=$(date +%s)
[ -f "$M" ] || python3 tools/make_bench_model.py --tokenizer-from "$TOKENIZER_SRC" --out "$M" || exit 1
echo "model written in $(( $(date +%s) - t0 )) s"
timeout 300 "$BIN/bench_engine" "$M" "$OUT/engine_bench.json" || { echo "bench_engine FAILED"; status=1; }
PYTHONUNBUFFERED=1 timeout 150 python3 bench/cuda/engine/torch_e2e.py "$OUT/torch_e2e.json" || { echo "torch FAILED"; status=1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
exit $status
