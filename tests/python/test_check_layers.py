"""tools/check_layers.py: the tree passes, and each kind of wrong include in a small copy of
the layout is reported (an include up the order, between peers, relative or bare paths, a
header that does not exist, a public header reaching into src/)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import check_layers  # tools/ (conftest puts it on the path)

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tools" / "check_layers.py"


def run_checker(root: Path):
    return subprocess.run([sys.executable, str(CHECKER), "--root", str(root)], capture_output=True, text=True,
                          timeout=60)


def test_the_tree_obeys_the_layer_order():
    p = run_checker(ROOT)
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_command_fails_on_a_wrong_include(tmp_path):
    p = run_checker(make_tree(tmp_path, {"src/server/openai_api.c": '#include "cli/cli.h"\n',
                                         "src/cli/cli.h": ""}))
    assert p.returncode == 1 and "src/server/openai_api.c:1:" in p.stdout, p.stdout + p.stderr


def make_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    base = {
        "include/invar.h": "#include <stdint.h>\n",
        "src/common/utf8.h": "",
        "src/formats/gguf.h": '#include "common/utf8.h"\n',
        "src/tokenizer/tokenizer.h": '#include "formats/gguf.h"\n',
        "src/kernels/cpu/matmul.h": "",
        "src/sampling/sampler.h": '#include "invar.h"\n#include "kernels/cpu/matmul.h"\n',
        "src/engine/engine.c": '#include "engine/engine.h"\n#include <stdio.h>\n',
        "src/engine/engine.h": "",
        "src/server/server.h": "",
        "src/cli/cmd_serve.c": '#include "server/server.h"\n#include "invar.h"\n',
    }
    for rel, text in {**base, **files}.items():
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return tmp_path


def test_a_clean_copy_passes(tmp_path):
    assert check_layers.check(make_tree(tmp_path, {})) == []


@pytest.mark.parametrize("rel,text,message", [
    # the inversion of issue 20: the server reaching up into the CLI
    ("src/server/openai_api.c", '#include "cli/cli.h"\n', "layer server includes cli, a layer above it"),
    ("src/formats/gguf.c", '  #  include "engine/engine.h"\n', "layer formats includes engine, a layer above it"),
    ("src/tokenizer/bpe.c", '#include "kernels/cpu/matmul.h"\n', "layer tokenizer includes its peer kernels/cpu"),
    ("src/model/model.c", '#include "../formats/gguf.h"\n', 'name a header as "LAYER/file.h"'),
    ("src/engine/block_pool.c", '#include "engine.h"\n', 'name a header as "LAYER/file.h"'),
    ("src/engine/block_pool.c", '#include "engine/missing.h"\n', "no such header under src/"),
    ("src/common/clock.c", '#include "invar.h"\n', "layer common includes api, a layer above it"),
    ("src/kernels/cuda/gemm.cu", '#include "sampling/sampler.h"\n', "layer kernels/cuda includes sampling"),
    ("src/newlayer/x.c", "", "not in any layer"),
    ("include/invar.h", '#include "engine/engine.h"\n', "a public header includes only other public headers"),
])
def test_a_wrong_include_fails(tmp_path, rel, text, message):
    problems = check_layers.check(make_tree(tmp_path, {rel: text, "src/cli/cli.h": ""}))
    assert len(problems) == 1 and message in problems[0], problems  # that one, nothing else
