#!/usr/bin/env bash
# The second README command: the whole test suite.
#   0. Layer order: no include from a lower layer to a higher one (tools/check_layers.py)
#   1. Release build: C unit, kernel and end-to-end invariance tests (ctest)
#   2. Python tests: reference tokenizer, numpy reference logits, CLI behaviour, the Python
#      package (pip-installed from the Release build's libinvar.so), its torch trainer (torch
#      from requirements-torch.txt, installed into .venv in the background during stage 1;
#      INVAR_SKIP_TORCH=1 leaves it out and those tests skip) (pytest)
#   3. ASan+UBSan build: the same C tests
#   4. ThreadSanitizer build: the multi-threaded C tests and the server's concurrent tests
#   5. libFuzzer: each fuzz target briefly, from its seed corpus (fuzz_invariance: every
#      request equals its solo run, on a tiny generated model; its negative controls fail;
#      fuzz_safetensors gets a third of the time)
#   6. CUDA backend: compiled and linked when nvcc is present (nothing here runs it)
# Run scripts/setup.sh once first. FUZZ_SECONDS (default 8) sets the time per fuzz target.
set -uo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-8}
JOBS=$(nproc)
passed=0
failed=0
failures=""

timings=""
t_suite=$SECONDS

# torch (~3 GB with its CUDA libraries, mostly download and unpacking) installs while the
# Release stage keeps the CPUs busy; the Python stage waits for it.
torch_pid=""
torch_log=.venv/torch-install.log
if [ "${INVAR_SKIP_TORCH:-0}" != 1 ] && ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
    echo "installing torch into .venv in the background (log: $torch_log)"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-torch.txt \
        >"$torch_log" 2>&1 &
    torch_pid=$!
fi

# Runs one stage and prints its wall-clock time, with the CPU time of everything it ran
# (user + sys, children included): on a shared machine the wall time says little, and the
# CPU time divided by the cores it can use estimates the wall time on an idle one.
stage() { # name command...
    local name=$1
    shift
    echo
    echo "=== $name ==="
    local t0=$SECONDS cpu0 cpu1 rc
    cpu0=$(cpu_seconds)
    "$@"
    rc=$?
    cpu1=$(cpu_seconds)
    local took
    took=$(printf '%5d s wall %6d s cpu' $((SECONDS - t0)) $((cpu1 - cpu0)))
    timings="$timings$(printf '%-16s %s' "$name" "$took")"$'\n'
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1))
        echo "=== $name: ok ($took) ==="
    else
        failed=$((failed + 1))
        failures="$failures $name"
        echo "=== $name: FAILED ($took) ==="
    fi
}

# CPU seconds used so far by this shell's finished children (cutime + cstime, /proc/PID/stat
# fields 16 and 17; $$ is this shell even inside the command substitution).
cpu_seconds() {
    local f
    read -ra f </proc/$$/stat
    echo $(((f[15] + f[16]) / CLK_TCK))
}
CLK_TCK=$(getconf CLK_TCK)

release() {
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DINVAR_CUDA=OFF >/dev/null &&
        cmake --build build -j"$JOBS" &&
        (cd build && ctest --output-on-failure -j"$JOBS")
}

# The Python package (python/) is pip-installed into .venv around the Release build's
# libinvar.so (INVAR_PREBUILT_LIBRARY: ~3 s, no third compile of the C code), and its tests
# import the installed copy (INVAR_PACKAGE_INSTALLED=1).
python_tests() {
    local require_torch=1
    [ "${INVAR_SKIP_TORCH:-0}" = 1 ] && require_torch=0
    if [ -n "$torch_pid" ] && ! wait "$torch_pid"; then
        echo "installing torch failed:"
        tail -20 "$torch_log"
        return 1
    fi
    INVAR_PREBUILT_LIBRARY="$PWD/build/libinvar.so" .venv/bin/python -m pip install --quiet \
        --disable-pip-version-check --no-build-isolation --no-deps --force-reinstall ./python || return 1
    INVAR_BUILD_DIR="$PWD/build" INVAR_BIN="$PWD/build/invar" HF_HUB_OFFLINE=1 INVAR_PACKAGE_INSTALLED=1 \
        INVAR_REQUIRE_TORCH=$require_torch INVAR_MODEL="$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
        .venv/bin/python -m pytest -q tests/python
}

sanitizers() {
    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DINVAR_SANITIZE=ON -DINVAR_CUDA=OFF >/dev/null &&
        cmake --build build-asan -j"$JOBS" &&
        (cd build-asan && INVAR_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
            ctest --output-on-failure -j"$JOBS")
}

# ThreadSanitizer: the multi-threaded parts (the thread pool and the kernels' task split,
# the engine on 2 threads, the server's connection and engine threads). The C tests run their
# quick sizes; the server runs its concurrent tests (many streams, disconnects, SIGTERM
# drain) with every report written to a log, and any report fails the stage.
TSAN_TESTS="test_threadpool test_matmul_multi test_attention_invariance test_engine_requests test_serving_determinism"
TSAN_SERVER_TESTS="online_invariance or load_100_streams or disconnect or closed_client or half_closed or sigterm"
thread_sanitizer() {
    cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DINVAR_SANITIZE=thread -DINVAR_CUDA=OFF >/dev/null &&
        cmake --build build-tsan -j"$JOBS" --target invar_cli $TSAN_TESTS || return 1
    local tests_re
    tests_re="^($(echo "$TSAN_TESTS" | tr ' ' '|'))\$"
    (cd build-tsan && INVAR_TEST_QUICK=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
        ctest --output-on-failure -j"$JOBS" -R "$tests_re") || return 1
    local logs
    logs=$(mktemp -d)
    INVAR_BUILD_DIR="$PWD/build-tsan" INVAR_BIN="$PWD/build-tsan/invar" HF_HUB_OFFLINE=1 \
        INVAR_SERVE_START_S=180 INVAR_SERVE_LOAD_LIMIT_S=300 \
        INVAR_MODEL="$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf" TSAN_OPTIONS="log_path=$logs/tsan" \
        .venv/bin/python -m pytest -q tests/python/test_server.py -k "$TSAN_SERVER_TESTS"
    local rc=$?
    if compgen -G "$logs/tsan*" >/dev/null; then
        cat "$logs"/tsan*
        echo "ThreadSanitizer reports from invar serve (above)"
        rc=1
    fi
    rm -rf "$logs"
    return $rc
}

fuzz() {
    cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DINVAR_FUZZ=ON \
        -DINVAR_TESTS=OFF -DINVAR_CUDA=OFF >/dev/null && cmake --build build-fuzz -j"$JOBS" || return 1
    # fuzz_invariance runs a tiny generated model (512-token vocabulary), written once.
    local tiny=build-fuzz/tiny_llama_q8_0.gguf
    [ -f "$tiny" ] || .venv/bin/python tools/make_tiny_model.py --arch llama --type Q8_0 --vocab 512 \
        --out "$tiny" || return 1
    local ok=0
    for bin in build-fuzz/fuzz_*; do
        local name
        name=$(basename "$bin")
        local corpus=tests/fuzz/corpus/${name#fuzz_}
        local work
        work=$(mktemp -d)
        [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
        # The safetensors header parser is small (its seeds cover it in seconds): a third of
        # the time, so the target costs CI little.
        local secs=$FUZZ_SECONDS
        [ "$name" = fuzz_safetensors ] && secs=$(((FUZZ_SECONDS + 2) / 3))
        echo "fuzzing $name for ${secs}s"
        "$bin" -max_total_time="$secs" -print_final_stats=0 "$work" >"$work.log" 2>&1 || {
            tail -40 "$work.log"
            ok=1
        }
        rm -rf "$work" "$work.log"
    done
    # fuzz_invariance's negative controls: on an engine with a non-invariant attention split
    # or sampler draw, the same property must fail on the seed corpus.
    for control in attention draw; do
        if INVAR_FUZZ_NEGATIVE_CONTROL=$control build-fuzz/fuzz_invariance tests/fuzz/corpus/invariance/* \
            >/dev/null 2>&1; then
            echo "fuzz_invariance: negative control '$control' found no difference"
            ok=1
        fi
    done
    return $ok
}

cuda_build() {
    if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
        echo "nvcc not found: skipped"
        return 0
    fi
    [ -f cmake/cuda.cmake ] || { echo "no CUDA backend in this tree"; return 0; }
    export PATH=$PATH:/usr/local/cuda/bin
    cmake -S . -B build-cuda-ci -DCMAKE_BUILD_TYPE=Release -DINVAR_CUDA=ON -DINVAR_TESTS=OFF >/dev/null &&
        cmake --build build-cuda-ci -j"$JOBS"
}

stage layer-order python3 tools/check_layers.py
stage release-tests release
stage python-tests python_tests
stage sanitizer-tests sanitizers
stage tsan-tests thread_sanitizer
stage fuzz fuzz
stage cuda-build cuda_build

echo
echo "stage times:"
printf '%s' "$timings"
printf '%-16s %5d s wall\n' total $((SECONDS - t_suite))
[ -n "$failures" ] && echo "failed stages:$failures"
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
