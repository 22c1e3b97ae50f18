#!/usr/bin/env bash
# Builds the CUDA backend, runs its device tests and the benchmark on a Hopper GPU in one go,
# writing logs, JSON and the chart under $OUT (default ./out/cuda, git-ignored).
# Usage: scripts/cuda_device_run.sh [tests|bench|torch|all]...   (default: all)
# CUDA_TESTS="test_cuda_attention ..." runs only those tests; BENCH_SECTIONS="attn ..." only
# those bench sections (gemm, rows, attn). Test environment variables pass through, e.g.
# INVAR_CUDA_TEST_TINY=1 (test_cuda_attention: short sequences, every token vs fp64).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out/cuda}
B=${INVAR_CUDA_BUILD:-/tmp/invar-cuda-build}
mkdir -p "$OUT" "$B"
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
what=${*:-all}
want() { [[ " $what " == *" all "* || " $what " == *" $1 "* ]]; }
status=0

echo "== device =="
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv | tee "$OUT/cuda_device_before.csv"
nvcc --version | tail -2

echo "== build =="
# CMake's kernels-only mode: the CUDA kernels, their device tests and bench_cuda, without the
# engine's libraries (the device image has none of them). ptxas reports registers and spills.
command -v ninja >/dev/null && gen=(-G Ninja) || gen=()
cmake -S . -B "$B" "${gen[@]}" -DINVAR_CUDA_KERNELS_ONLY=ON -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_FLAGS="-Xptxas -v" > "$B/configure.txt" 2>&1 || { cat "$B/configure.txt"; echo "CONFIGURE FAILED"; exit 1; }
cmake --build "$B" -j"$(nproc)" > "$B/build.txt" 2>&1 || status=1
grep -E "error|warning|Compiling entry|registers|spill" "$B/build.txt" | sed 's/ptxas info    : //'
[ $status = 0 ] || { echo "BUILD FAILED"; cat "$B/build.txt"; exit 1; }
if command -v cuobjdump >/dev/null; then
  o=$(find "$B" -name 'gemm_invariant.cu.o' | head -1)
  echo "SASS tensor-core instructions in the GEMM object: $(cuobjdump --dump-sass "$o" | grep -c HGMMA) HGMMA, $(cuobjdump --dump-sass "$o" | grep -c -E 'HMMA') HMMA"
  o=$(find "$B" -name 'attention.cu.o' | head -1)
  # wgmma kernel: HGMMA; the previous mma.sync kernel (kept for comparison): HMMA
  [ -n "$o" ] && echo "SASS tensor-core instructions in the attention object: $(cuobjdump --dump-sass "$o" | grep -c HGMMA) HGMMA, $(cuobjdump --dump-sass "$o" | grep -c -E 'HMMA') HMMA"
fi

if want tests; then
  for t in "$B"/test_cuda_*; do
    [[ -x "$t" && "$t" != *.o ]] || continue
    [[ -z "${CUDA_TESTS:-}" || " $CUDA_TESTS " == *" $(basename "$t") "* ]] || continue
    echo "== $(basename "$t") =="
    timeout 200 "$t"; rc=$?
    if [ $rc = 77 ]; then echo "$(basename "$t") skipped"; elif [ $rc != 0 ]; then echo "$(basename "$t") FAILED (rc $rc)"; status=1; fi
  done
fi
if want bench; then
  echo "== bench =="
  timeout 420 "$B/bench_cuda" "$OUT/cuda_bench.json" ${BENCH_SECTIONS:-} || { echo "bench FAILED"; status=1; }
fi
if want torch; then
  echo "== torch reference timings =="
  PYTHONUNBUFFERED=1 timeout 600 python3 bench/cuda/torch_ref.py "$OUT/cuda_torch.json" || { echo "torch_ref FAILED"; status=1; }
fi
if [ -f "$OUT/cuda_bench.json" ] && [ -f bench/cuda/plot.py ]; then
  python3 bench/cuda/plot.py "$OUT" || echo "plot failed"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/cuda_device_after.csv"
echo "status $status"
exit $status
