#!/usr/bin/env bash
# The first README command: install dependencies, fetch the default model, build, and run
# the main job (a few prompts, alone and batched, with the bitwise invariance check shown).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/fetch_model.sh
scripts/build.sh
build/invar demo
