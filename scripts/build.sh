#!/usr/bin/env bash
# Builds invar (Release) into build/. Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DINVAR_CUDA=OFF "$@" >/dev/null
cmake --build build -j"$(nproc)"
