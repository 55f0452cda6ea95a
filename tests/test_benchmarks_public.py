"""The probes in benchmarks/ use public surfaces only, so production code keeps no hook
for them: no private attribute of another module (``x._name``), no import of a private
name or module of nmsbench, and the path override they rely on exists on both backends."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from nmsbench.variants import hard_fused, matrix_recompute

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


def test_there_are_probes():
    assert {"ab.py", "paths.py"} <= {script.name for script in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_probe_reaches_into_no_private_state(script):
    tree = ast.parse(script.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            assert not (node.attr.startswith("_") and not node.attr.startswith("__")), (script.name, node.attr)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nmsbench"):
            assert not any(part.startswith("_") for part in node.module.split(".")), (script.name, node.module)
            assert not any(alias.name.startswith("_") for alias in node.names), (script.name, node.module)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("nmsbench"):
                    assert not any(part.startswith("_") for part in alias.name.split(".")), (script.name, alias.name)


@pytest.mark.parametrize("package", [hard_fused, matrix_recompute], ids=lambda m: m.__name__)
def test_both_kernel_packages_offer_the_same_instrumentation(package):
    """``path=`` on the CUDA backend, ``choose_path`` and ``check_path`` with one signature, a ``PATHS`` table."""
    backend = getattr(package, f"{package.__name__.rsplit('.', 1)[1]}_cuda")
    assert inspect.signature(backend).parameters["path"].default is None
    assert list(inspect.signature(package.choose_path).parameters) == ["n", "dtype", "padded", "device", "labels"]
    assert list(inspect.signature(package.check_path).parameters) == ["path", "n", "dtype", "padded", "device",
                                                                      "labels"]
    assert package.PATHS and all(name.islower() and " " not in name for name in package.PATHS)
