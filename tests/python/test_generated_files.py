"""Committed generated files equal what their generators in tools/ write today: a change
must go into the generator, never into the output alone."""
from __future__ import annotations

import re
import subprocess
import sys
import unicodedata

import pytest


def generate(repo_root, script):
    return subprocess.run([sys.executable, str(repo_root / "tools" / script)], check=True,
                          capture_output=True, timeout=120).stdout


def test_wgmma_header_is_generated(repo_root):
    out = repo_root / "src" / "kernels" / "cuda" / "wgmma_bf16.cuh"
    assert generate(repo_root, "gen_wgmma.py") == out.read_bytes()


def test_attention_wgmma_header_is_generated(repo_root):
    out = repo_root / "src" / "kernels" / "cuda" / "wgmma_m64n64k16.cuh"
    assert generate(repo_root, "gen_wgmma_attn.py") == out.read_bytes()


def test_unicode_tables_are_generated(repo_root):
    out = repo_root / "src" / "tokenizer" / "unicode_tables.c"
    committed = out.read_bytes()
    version = re.search(rb'unicode_tables_version\[\] = "([^"]+)"', committed).group(1).decode()
    if version != unicodedata.unidata_version:  # the tables follow Python's Unicode database
        pytest.skip(f"tables are Unicode {version}, this Python has {unicodedata.unidata_version}")
    assert generate(repo_root, "gen_unicode_tables.py") == committed
