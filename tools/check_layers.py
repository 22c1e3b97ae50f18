#!/usr/bin/env python3
"""Fails if a source file under src/ includes a header of a layer above its own, of a peer
layer, or names a header in any style but the tree's one (docs/architecture.md):

  #include "LAYER/file.h"   a header of src/LAYER/ (its own layer or one below)
  #include "invar.h"        a public header of include/ (owned by the layer in PUBLIC)
  #include <...>            system and library headers (not checked)

Usage: tools/check_layers.py [--root DIR]   (DIR: the repository root; default: this tree)
Exit status 0 when every include points down, 1 with one line per violation otherwise."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# Layer -> rank. A file may include its own layer's headers and those of lower ranks only;
# layers of one rank are peers and independent of each other.
RANKS = {
    "common": 0,        # clock, UTF-8 clean-up, float32 text, error lines
    "formats": 1,       # GGUF, quantised block types
    "tokenizer": 2,     # BPE, chat templates
    "kernels/cpu": 2,   # matmul, attention, row ops, thread pool
    "kernels/cuda": 2,  # the GPU kernels (include/invar_cuda.h)
    "model": 3,         # hyperparameters, weights, the CPU forward pass
    "api": 4,           # include/invar.h: the public types (implemented by engine)
    "sampling": 5,      # sampler and RNG
    "backend": 6,       # CPU and CUDA backends behind one interface
    "engine": 7,        # scheduler, KV blocks, prefix cache; the public API
    "request": 8,       # JSON request -> prompt tokens + sampling (batch and server)
    "server": 9,        # the OpenAI HTTP server (a library)
    "cli": 10,          # the invar program: the top
}
# Public headers in include/ and the layer each belongs to.
PUBLIC = {"invar.h": "api", "invar_cuda.h": "kernels/cuda"}
SOURCE_SUFFIXES = {".c", ".h", ".cu", ".cuh"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(rel: str) -> str | None:
    """The layer owning src/-relative path rel: the longest layer name that prefixes it."""
    best = None
    for layer in RANKS:
        if rel.startswith(layer + "/") and (best is None or len(layer) > len(best)):
            best = layer
    return best


def check(root: Path) -> list[str]:
    src = root / "src"
    problems = []
    for path in sorted(p for p in src.rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file()):
        rel = path.relative_to(src).as_posix()
        own = layer_of(rel)
        if own is None:
            problems.append(f"src/{rel}: not in any layer (add its folder to RANKS in tools/check_layers.py)")
            continue
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc, where = m.group(1), f"src/{rel}:{lineno}"
            if inc in PUBLIC:
                target = PUBLIC[inc]
            else:
                target = layer_of(inc)
                if target is None or ".." in inc.split("/"):
                    problems.append(f'{where}: #include "{inc}": name a header as "LAYER/file.h" '
                                    "(relative to src/) or a public header of include/")
                    continue
                if not (src / inc).is_file():
                    problems.append(f'{where}: #include "{inc}": no such header under src/')
                    continue
            if target == own:
                continue
            if RANKS[target] > RANKS[own]:
                problems.append(f'{where}: #include "{inc}": layer {own} includes {target}, a layer above it')
            elif RANKS[target] == RANKS[own]:
                problems.append(f'{where}: #include "{inc}": layer {own} includes its peer {target}')
    for path in sorted((root / "include").glob("*.h")):
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if m and m.group(1) not in PUBLIC:
                problems.append(f'include/{path.name}:{lineno}: #include "{m.group(1)}": a public header '
                                "includes only other public headers")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = ap.parse_args()
    if not (args.root / "src").is_dir():
        print(f"check_layers: no src/ under {args.root}", file=sys.stderr)
        return 2
    problems = check(args.root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} include(s) against the layer order", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
