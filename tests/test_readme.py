"""README.md is for users: short, its Python snippets run as written, its set-up commands
are the ones CI runs, and it is no lab notebook (no commit hashes, no log references)."""

from __future__ import annotations

import re

import pytest

from dash_support import REPO

README = REPO / "README.md"
TEXT = README.read_text(encoding="utf-8")
MAX_LINES = 300  # for users: commands and a few headline figures; reference tables go to results/README.md
NEEDS_CUDA = "# needs CUDA"

SETUP_COMMANDS = (
    'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[dev]" && nmsbench sweep --n 64..1024 --device cpu',
    'apt-get update -qq && apt-get install -y -qq chromium && python3 -m venv .venv && . .venv/bin/activate '
    '&& pip install -e ".[dev,cuda13,externals]" && pytest',
)


def python_snippets() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", TEXT, flags=re.S | re.M)


def test_readme_is_short():
    lines = TEXT.count("\n") + (not TEXT.endswith("\n"))
    assert lines <= MAX_LINES, f"README.md has {lines} lines; at most {MAX_LINES} (details go to docs, results/README.md or PERFLOG.md)"


def test_readme_gives_the_two_setup_commands():
    lines = [line.strip() for line in TEXT.splitlines()]
    for command in SETUP_COMMANDS:
        assert command in lines, f"README lost the set-up command: {command}"


def test_readme_has_python_snippets():
    assert len(python_snippets()) >= 2


@pytest.mark.parametrize("index", range(len(python_snippets())))
def test_readme_python_snippet_runs_on_cpu(index):
    snippet = python_snippets()[index]
    if snippet.lstrip().startswith(NEEDS_CUDA):
        pytest.skip("snippet marked '# needs CUDA'")
    code = compile(snippet, f"README.md python snippet {index + 1}", "exec")
    exec(code, {"__name__": "__readme__"})  # a fresh namespace per snippet


def test_readme_links_to_files_that_exist():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", TEXT)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert local
    missing = [t for t in local if not (REPO / t).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_readme_is_no_run_diary():
    hashes = [h for h in re.findall(r"\b[0-9a-f]{7,40}\b", TEXT) if re.search(r"\d", h) and re.search(r"[a-f]", h)]
    assert not hashes, f"commit hashes in README (provenance belongs in results/README.md): {hashes}"
    assert not re.search(r"\bPERFLOG entry\b|\bentry \d+\b", TEXT), "README cites PERFLOG entries"
