#!/usr/bin/env bash
# Builds the CUDA backend, runs its device tests and the benchmark on a Hopper GPU in one go,
# writing logs, JSON and the chart under $OUT (default ./out/cuda, git-ignored).
# Usage: scripts/cuda_device_run.sh [tests|bench|torch|all]...   (default: all)
# CUDA_TESTS="test_cuda_attention ..." runs only those tests; BENCH_SECTIONS="attn ..." only
# those bench sections.
# Plain nvcc/gcc commands, not CMake: the device image lacks the CPU engine's dependencies.
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
GENCODE="-gencode=arch=compute_90a,code=sm_90a"
pids=()
for f in src/kernels/cuda/*.cu; do
  nvcc -c -O3 -std=c++17 $GENCODE -Xptxas -v -Xptxas -warn-spills -Iinclude -Isrc \
    "$f" -o "$B/$(basename "$f" .cu).o" > "$B/$(basename "$f" .cu).ptxas.txt" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
cat "$B"/*.ptxas.txt | grep -E "error|warning|Compiling entry|registers|spill" | sed 's/ptxas info    : //'
[ $status = 0 ] || { echo "BUILD FAILED"; cat "$B"/*.ptxas.txt; exit 1; }
rm -f "$B/libinvar_cuda.a"
ar rcs "$B/libinvar_cuda.a" "$B"/*.o
CFLAGS="-O2 -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude -Isrc -Itests/cuda -Ibench/cuda -I$(dirname "$(command -v nvcc)")/../include"
gcc $CFLAGS -c tests/cuda/cuda_test_util.c -o "$B/util.o" || exit 1
link() { nvcc -o "$1" "${@:2}" "$B/util.o" -L"$B" -linvar_cuda -lcublas -lm; }
for t in tests/cuda/test_*.c; do
  n=$(basename "$t" .c)
  gcc $CFLAGS -c "$t" -o "$B/$n.o" && link "$B/$n" "$B/$n.o" || exit 1
done
bo=()
for f in bench/cuda/*.c; do gcc $CFLAGS -c "$f" -o "$B/bench_$(basename "$f" .c).o" || exit 1; bo+=("$B/bench_$(basename "$f" .c).o"); done
link "$B/bench_cuda" "${bo[@]}" || exit 1
if command -v cuobjdump >/dev/null; then
  echo "SASS tensor-core instructions in the GEMM object: $(cuobjdump --dump-sass "$B/gemm_invariant.o" | grep -c HGMMA) HGMMA, $(cuobjdump --dump-sass "$B/gemm_invariant.o" | grep -c -E 'HMMA') HMMA"
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
