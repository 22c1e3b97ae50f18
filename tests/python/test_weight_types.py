"""The engine's invariance suite (tests/unit/test_engine_invariance.c: batched equals alone
bit for bit across batch sizes, threads, chunking, and its negative controls, which must
fail) run unchanged on a file holding every quantised weight type, one per tensor
(make_tiny_model's EVERY mix: Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL MXFP4 Q2_K Q3_K Q4_K Q5_K
Q6_K IQ4_XS). The suite reads its model from INVAR_MODEL."""
import os
import subprocess

import pytest

from conftest import BUILD_DIR


def test_engine_invariance_suite_on_every_weight_type(synthetic_model):
    binary = BUILD_DIR / "test_engine_invariance"
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{binary} not built")
    model = synthetic_model("llama-output-EVERY")
    env = dict(os.environ, INVAR_MODEL=str(model))
    p = subprocess.run([str(binary)], env=env, capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "0/" in out and "batched requests differ from alone" in out, out[-3000:]
    # the negative controls ran (and, as the suite asserts, were detected)
    assert out.count("# negative control") >= 3, out[-3000:]
