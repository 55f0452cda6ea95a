"""The code carries invariants, not a lab notebook: no timings, GPU model names, commit
hashes or PERFLOG entry references in the comments and docstrings of the implementations,
the harness and the dashboard. Measurements live in results/PERFLOG.md, provenance in
results/README.md and the results' sidecars.

Python comments and docstrings (every statement that is a bare string) come from
``tokenize``; CUDA comments (``//`` and ``/* */``, outside string and character literals)
from a small scanner."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from dash_support import REPO


def checked_files() -> list[Path]:
    files = [*(REPO / "implementations").rglob("*.py"), *(REPO / "implementations").rglob("*.cu"),
             *(REPO / "implementations").rglob("*.cuh"), *(REPO / "nmsbench").rglob("*.py"), REPO / "app.py"]
    return sorted(p for p in files if "__pycache__" not in p.parts and p.is_file())


# ------------------------------------------------------------------ extracting comments

def python_comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every bare-string statement (docstrings included)."""
    out = []
    previous = tokenize.NEWLINE  # the start of a logical line
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            out.append((token.start[0], token.string))
        elif token.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            out.extend((token.start[0] + i, line) for i, line in enumerate(token.string.splitlines()))
        if token.type not in (tokenize.COMMENT, tokenize.NL):
            previous = token.type
    return out


def cuda_comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of every line of every // and /* */ comment, outside literals."""
    out, i, n, line = [], 0, len(source), 1
    while i < n:
        c = source[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            i = j + 1
        elif source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            out.append((line, source[i:end]))
            i = end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            for k, text in enumerate(source[i:end].split("\n")):
                out.append((line + k, text))
            line += source.count("\n", i, end)
            i = end
        else:
            i += 1
    return out


def comments(path: Path) -> list[tuple[int, str]]:
    source = path.read_text(encoding="utf-8")
    return python_comments(source) if path.suffix == ".py" else cuda_comments(source)


# ------------------------------------------------------------------ the rules

TIMING = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*\s*(?:µs|μs|us|ms|ns|cycles)\b")
GPU_MODEL = re.compile(r"\b(?:G?[HB][12]00|GB200|[AVPK]100|K80|A10G?|A30|A40|A[456]000|L4|L40S?|T4|"
                       r"RTX\s?\d{4}|GTX\s?\d{3,4}|Titan\s?[VX]|MI\d{3}X?)\b")
HEX = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
ENTRY = re.compile(r"\bPERFLOG(?:\.md)?\s*(?:entry|entries|#)?\s*\d+|\bentr(?:y|ies)\s+\d+\b", re.I)


def commit_hashes(text: str) -> list[str]:
    """Hex words of 7 to 40 digits with both a digit and a letter (not 0x constants, not
    plain numbers, not words)."""
    return [h for h in HEX.findall(text) if re.search(r"\d", h) and re.search(r"[a-f]", h)]


RULES = {
    "timing": lambda text: TIMING.findall(text),
    "GPU model": lambda text: GPU_MODEL.findall(text),
    "commit hash": commit_hashes,
    "PERFLOG entry": lambda text: ENTRY.findall(text),
}


def findings(rule: str) -> list[str]:
    found = []
    for path in checked_files():
        for line, text in comments(path):
            hits = RULES[rule](text)
            if hits:
                found.append(f"{path.relative_to(REPO)}:{line}: {', '.join(map(str, hits))}")
    return found


@pytest.mark.parametrize("rule", sorted(RULES))
def test_comments_and_docstrings_carry_no_lab_notes(rule):
    found = findings(rule)
    assert not found, (f"{len(found)} comment/docstring line(s) with a {rule} (measurements go to "
                       f"results/PERFLOG.md):\n" + "\n".join(found))


# ------------------------------------------------------------------ the scanners themselves

def test_the_python_scanner_reads_comments_and_docstrings_not_code():
    source = ('"""Module doc: 12 us."""\n'
              'X = "a string 5 ms in code"  # a comment: H200\n'
              'def f():\n'
              '    """Doc of f, commit 540f31d."""\n'
              '    return "not a docstring 3 ns"\n'
              'class C:\n'
              '    """Line one\n'
              '    PERFLOG entry 27."""\n')
    found = python_comments(source)
    text = "\n".join(t for _, t in found)
    assert "12 us" in text and "H200" in text and "540f31d" in text and "PERFLOG entry 27" in text
    assert "5 ms" not in text and "3 ns" not in text
    assert (8, '    PERFLOG entry 27."""') in found
    assert {rule for rule, check in RULES.items() if check(text)} == set(RULES)


def test_the_cuda_scanner_reads_both_comment_forms_outside_literals():
    source = ('const char* s = "// not a comment 5 us";\n'
              'int x = 1;  // 40 cycles on the H100\n'
              "char c = '/';\n"
              '/* first line\n'
              '   second, at abc1234 */ int y;\n')
    found = cuda_comments(source)
    assert (2, "// 40 cycles on the H100") in found
    assert (5, "   second, at abc1234 */") in found
    assert not any("5 us" in t for _, t in found)


def test_the_rules_let_ordinary_comments_pass():
    for text in ("# 32 x 32 tiles, 256 threads a block, sm_90 and float32", "// mask 0xffffffff, N = 1048576",
                 "# the entry point; entries of keep", "// a 64-bit word per 64 boxes, 2 ms_per_call unused"):
        assert not [rule for rule, check in RULES.items() if check(text)], text
