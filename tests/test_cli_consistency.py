"""What every command shares: bad input is a usage error (exit 2) that names the option at
fault, cuda without a CUDA device is the same message everywhere, and the files its --help
examples name under results/ are committed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from nmsbench.cli import main

ROOT = Path(__file__).resolve().parent.parent
RESULTS = "results/h200-host-cpu.csv"  # a committed sweep
CUDA_MESSAGE = "--device cuda was asked for, but no CUDA device is available here (torch.cuda.is_available() is False)"


def invoke(args, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the committed results files by their relative paths
    return CliRunner().invoke(main, [a.format(tmp=tmp_path) for a in args])


@pytest.mark.parametrize("args, hint", [
    (["sweep", "--n", "0", "--out", "{tmp}/s.csv"], "--n"),
    (["pipeline", "--batch", "0", "--out", "{tmp}/p.csv"], "--batch"),
    (["accuracy", "--images", "0", "--out", "{tmp}/a.csv"], "--images"),
    (["diff", "--iou", "2", "--out", "{tmp}/d.json"], "--iou"),
    (["compare", RESULTS, RESULTS, "--threshold", "-1"], "--threshold"),
    (["export", RESULTS, "--scenario", "nowhere"], "--scenario"),
    (["plot", RESULTS, "-o", "{tmp}/fig.gif"], "--out"),
    (["conformance", "--family", "nowhere"], "--family"),
    (["list", "--nowhere"], "--nowhere"),
], ids=lambda v: v[0] if isinstance(v, list) else None)
def test_a_bad_value_of_every_command_exits_2_naming_the_option(args, hint, tmp_path, monkeypatch):
    result = invoke(args, tmp_path, monkeypatch)
    assert result.exit_code == 2, result.output
    assert hint in result.output.splitlines()[-1] and "Traceback" not in result.output
    assert not [p for p in tmp_path.iterdir()]  # nothing written


@pytest.mark.parametrize("args, hint", [
    (["sweep", "--scenario", "file", "--file", "{tmp}/junk.csv", "--out", "{tmp}/s.csv"], "--file"),
    (["diff", "--scenario", "file", "--file", "{tmp}/junk.csv", "--out", "{tmp}/d.json"], "--file"),
    (["export", "{tmp}/junk.csv"], "RESULTS"),
    (["plot", "{tmp}/junk.csv", "-o", "{tmp}/fig.pdf"], "RESULTS"),
    (["compare", "{tmp}/junk.csv", RESULTS], "not an nmsbench results file"),
], ids=lambda v: v[0] if isinstance(v, list) else None)
def test_a_file_that_is_not_what_the_command_reads_exits_2(args, hint, tmp_path, monkeypatch):
    (tmp_path / "junk.csv").write_text("a,b\n1,2\n")
    result = invoke(args, tmp_path, monkeypatch)
    assert result.exit_code == 2 and hint in result.output and "junk.csv" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.csv"]


@pytest.mark.parametrize("args", [
    ["sweep", "--n", "16", "--impl", "torchvision", "--device", "cuda", "--out", "{tmp}/s.csv"],
    ["pipeline", "--batch", "1", "--device", "cuda", "--out", "{tmp}/p.csv"],
    ["accuracy", "--images", "2", "--device", "cuda", "--out", "{tmp}/a.csv"],  # its default implementations: none here
    ["diff", "--n", "16", "--device", "cuda", "--out", "{tmp}/d.json"],
    ["conformance", "--examples", "1", "--family", "empty_one", "--device", "cuda"],
], ids=lambda v: v[0])
def test_cuda_without_a_gpu_is_one_message_and_exit_2_everywhere(args, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = invoke(args, tmp_path, monkeypatch)
    assert result.exit_code == 2 and result.output.splitlines()[-1] == f"Error: {CUDA_MESSAGE}", result.output
    assert not [p for p in tmp_path.iterdir()]


def _helps() -> dict[str, str]:
    runner = CliRunner()
    texts = {"nmsbench": runner.invoke(main, ["--help"]).output}
    for name in main.commands:
        result = runner.invoke(main, [name, "--help"])
        assert result.exit_code == 0, result.output
        texts[name] = result.output
    return texts


def test_every_results_file_a_help_example_names_is_committed():
    helps = _helps()
    # the files an example reads (not those it writes: --out PATH, -o PATH)
    named = {name: re.findall(r"(?<!--out )(?<!-o )\bresults/[\w./-]+\.(?:csv|json|npz|jsonl)\b", text)
             for name, text in helps.items()}
    assert named["plot"] and named["export"] and named["compare"]  # their examples start from a committed sweep
    missing = {name: [p for p in paths if not (ROOT / p).is_file()] for name, paths in named.items()}
    assert not any(missing.values()), missing
