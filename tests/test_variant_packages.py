"""A variant that is a package (implementations/<name>/ with an __init__.py) installs
only if pyproject.toml lists it with its folder and its kernel sources; a missing entry
works in the editable checkout and fails in a wheel, so it is checked here."""

from __future__ import annotations

from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parent.parent


def test_every_variant_package_is_installed_with_its_kernels():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    for init in sorted((REPO / "implementations").glob("*/__init__.py")):
        folder = init.parent
        package = f"nmsbench.variants.{folder.name}"
        assert package in config["packages"], f"pyproject.toml: add {package} to [tool.setuptools] packages"
        assert config["package-dir"].get(package) == f"implementations/{folder.name}", package
        for pattern in KERNEL_SOURCES:
            if any(folder.glob(pattern)):
                assert pattern in config["package-data"].get(package, []), f"pyproject.toml: ship {package}'s {pattern}"


KERNEL_SOURCES = ("*.cu", "*.cuh")  # NVRTC reads both at run time, so a wheel must carry them


def test_every_harness_package_and_its_kernel_sources_are_installed():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    for folder, dotted in [(REPO / "implementations", "nmsbench.variants"), (REPO / "nmsbench", "nmsbench")]:
        for init in sorted(folder.rglob("__init__.py")):
            package = ".".join([dotted, *init.parent.relative_to(folder).parts])
            assert package in config["packages"], f"pyproject.toml: add {package} to [tool.setuptools] packages"
            for pattern in KERNEL_SOURCES:
                if any(init.parent.glob(pattern)):
                    assert pattern in config["package-data"].get(package, []), f"pyproject.toml: ship {package}'s {pattern}"


def test_the_kernel_packages_are_found_by_the_registry():
    import nmsbench

    impls = nmsbench.implementations()
    for init in (REPO / "implementations").glob("*/__init__.py"):
        assert init.parent.name in impls, f"{init.parent.name} registered nothing on import"
