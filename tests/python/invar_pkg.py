"""Imports the invar Python package for the tests.

By default the package from this tree's python/src with $INVAR_BUILD_DIR/libinvar.so, so
the tests see the code under test. With INVAR_PACKAGE_INSTALLED=1 (scripts/test.sh after
pip install ./python) the installed package is imported instead."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("INVAR_BUILD_DIR", str(REPO_ROOT / "build")))

if os.environ.get("INVAR_PACKAGE_INSTALLED") != "1":
    os.environ.setdefault("INVAR_LIBRARY", str(BUILD_DIR / "libinvar.so"))
    src = str(REPO_ROOT / "python" / "src")
    if src not in sys.path:
        sys.path.insert(0, src)

import invar  # noqa: E402

__all__ = ["invar"]
