#!/usr/bin/env bash
# Packs what a device call needs from this machine's CUDA build into .devcarry/ (git-ignored
# through .git/info/exclude; name it in the device call's carry): the binaries and libinvar.so
# from build-cuda, the shared libraries they use that a bare CUDA image lacks (not glibc's,
# not CUDA's), and a generated GGUF with the default model's tokenizer (the default model
# itself is over the carry limit). On the device: tar xJf .devcarry/bin.tar.xz -C /tmp, then
# BIN=/tmp/bin LIBS=/tmp/bin LIB=/tmp/bin/libinvar.so TOKENIZER_SRC=$PWD/.devcarry/tok.gguf.
set -eu -o pipefail
cd "$(dirname "$0")/.."
B=${B:-build-cuda}
D=$(mktemp -d)/bin
mkdir -p "$D" .devcarry
files=()
for f in invar libinvar.so spec_bench test_cuda_engine bench_engine bench_cuda test_cuda_gemm test_cuda_rows test_cuda_attention test_cuda_mla test_cuda_moe test_cuda_sampler; do
    [ -e "$B/$f" ] && files+=("$B/$f")
done
cp "${files[@]}" "$D/"
ldd "${files[@]}" 2>/dev/null | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/cuda' |
    while read -r lib; do cp -L "$lib" "$D/"; done
tar cJf .devcarry/bin.tar.xz -C "$(dirname "$D")" bin
[ -f .devcarry/tok.gguf ] || .venv/bin/python tools/make_tiny_model.py --out .devcarry/tok.gguf >/dev/null
du -sh .devcarry/*
