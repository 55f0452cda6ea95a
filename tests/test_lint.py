"""The code passes the linter configured in pyproject.toml ([tool.ruff]); CI runs it here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> list[str]:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: pip install -e '.[dev]'")
    return [found]


def test_ruff_check_is_clean():
    done = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_finds_what_it_is_configured_to_find(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f(x=[]):\n    return undefined_name\n")
    done = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise",
                           "--config", str(ROOT / "pyproject.toml"), str(bad)], capture_output=True, text=True)
    assert done.returncode == 1
    for code in ("F401", "F821", "B006"):
        assert code in done.stdout, done.stdout
