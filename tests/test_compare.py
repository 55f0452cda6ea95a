"""`nmsbench compare`: pairing two runs by case, the verdicts from raw samples, the CLI.

The verdict rule is pinned on synthetic samples (known distributions, seeded); a real CPU
sweep checks the machinery end to end: a test-only copy made much slower is `slower`,
and a run compared with its twin is never `faster`/`slower` at a threshold far above any
machine's noise. No test asserts a time.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from click.testing import CliRunner

from compare_support import ENV_A, ENV_B, draws, row, timed, write_run
from nmsbench import compare
from nmsbench.compare_cli import compare_command
from nmsbench.results import read_results

# --- the verdict rule on synthetic samples ---------------------------------------------------

@pytest.mark.parametrize("factor, verdict", [(1.0, "same"), (1.02, "same"), (1.10, "slower"), (0.90, "faster"),
                                             (1.30, "slower"), (0.5, "faster")])
def test_a_clear_shift_is_faster_or_slower_and_a_small_one_same(factor, verdict):
    call = compare.judge(draws(100, 1), draws(100 * factor, 2))
    assert call["verdict"] == verdict, call
    assert call["ratio"] == pytest.approx(factor, rel=0.02)
    assert call["ci_low"] <= call["ratio"] * 1.01 and call["ci_high"] >= call["ratio"] * 0.99
    if verdict != "same":
        assert call["p"] < compare.DEFAULT_ALPHA


def test_the_threshold_is_the_minimum_effect():
    base, new = draws(100, 1), draws(108, 2)
    assert compare.judge(base, new, threshold=0.05)["verdict"] == "slower"
    assert compare.judge(base, new, threshold=0.10)["verdict"] == "same"
    with pytest.raises(ValueError, match="threshold"):
        compare.judge(base, new, threshold=-0.1)
    with pytest.raises(ValueError, match="alpha"):
        compare.judge(base, new, alpha=0)


def test_a_large_but_not_significant_difference_is_uncertain():
    call = compare.judge(draws(100, 1, noise=0.6, blocks=3), draws(115, 2, noise=0.6, blocks=3))
    assert call["verdict"] == "uncertain" and "not significant" in call["why"], call


def test_rounds_that_disagree_make_a_significant_shift_uncertain():
    # blocks tight within each round, rounds far apart: the pooled test is sure, the rounds are not
    base, new = draws(100, 3, drift=0.3, noise=0.001, blocks=40), draws(112, 4, drift=0.3, noise=0.001, blocks=40)
    call = compare.judge(base, new)
    assert call["p"] < compare.DEFAULT_ALPHA and call["verdict"] == "uncertain", call
    assert "rounds disagree" in call["why"]


def test_a_noisy_row_within_the_threshold_is_uncertain_when_its_interval_reaches_beyond():
    base, new = draws(100, 11, drift=0.15), draws(101, 12, drift=0.15)
    assert compare.judge(base, new)["verdict"] == "same"
    call = compare.judge(base, new, noisy=True)
    assert call["verdict"] == "uncertain" and "noisy" in call["why"], call


def test_missing_or_too_few_samples_are_uncertain():
    assert compare.judge(None, draws(100, 1))["why"] == "no raw samples in BASE"
    assert compare.judge(draws(100, 1), None)["why"] == "no raw samples in NEW"
    few = compare.judge(draws(100, 1, rounds=1, blocks=3), draws(200, 2, rounds=1, blocks=3))
    assert few["verdict"] == "uncertain" and "too few samples" in few["why"]


def test_one_round_each_has_no_interval_and_the_test_decides():
    call = compare.judge(draws(100, 1, rounds=1, blocks=30), draws(120, 2, rounds=1, blocks=30))
    assert call["verdict"] == "slower" and math.isnan(call["ci_low"]), call


def test_a_a_pairs_of_one_distribution_are_never_faster_or_slower():
    """The machinery's false-positive rate: 200 pairs drawn from one distribution (seeded)."""
    calls = [compare.judge(draws(100, 2 * i, drift=0.01), draws(100, 2 * i + 1, drift=0.01))["verdict"]
             for i in range(200)]
    assert calls.count("same") == 200, pd.Series(calls).value_counts()


def test_the_estimate_stays_close_when_the_blocks_are_many():
    call = compare.judge(draws(100, 1, blocks=1000), draws(110, 2, blocks=1000))  # beyond MAX_PAIRS: quantiles
    assert call["ratio"] == pytest.approx(1.10, rel=0.01) and call["verdict"] == "slower"


# --- pairing two files -----------------------------------------------------------------------

def test_pairs_by_case_across_machines_and_commits(tmp_path):
    base = write_run(tmp_path / "base.csv", [timed(100, 1, n=256), timed(100, 3, n=512), timed(100, 5, n=1024)], ENV_A)
    new = write_run(tmp_path / "new.csv", [timed(100, 2, n=256), timed(130, 4, n=512), timed(70, 6, n=1024)], ENV_B)
    result = compare.compare_files(base, new)
    assert list(result.columns) == compare.OUT_COLUMNS
    assert dict(zip(result["n"], result["verdict"])) == {256: "same", 512: "slower", 1024: "faster"}
    assert result["base_median_us"].notna().all() and result["new_median_us"].notna().all()
    assert compare.counts(result) == {"slower": 1, "faster": 1, "same": 1}


def test_changed_agreement_or_status_is_changed_whatever_the_time(tmp_path):
    base = write_run(tmp_path / "base.csv", [timed(100, 1, n=256), timed(100, 3, n=512), timed(100, 5, n=1024),
                                             timed(100, 7, n=2048)])
    new = write_run(tmp_path / "new.csv", [timed(100, 2, n=256, kept=11, extra=1, jaccard=10 / 11),
                                           row(n=512, status="error", error="CUDA out of memory", median_us=""),
                                           timed(100, 6, n=1024, family_ref="soft_torch", family_jaccard=0.9),
                                           timed(100, 8, n=2048, jaccard=1.0 + 1e-12)])  # float noise: agrees
    result = compare.compare_files(base, new).set_index("n")
    assert list(result["verdict"]) == ["changed", "changed", "changed", "same"]
    assert "kept 10 → 11" in result.loc[256, "why"] and "extra 0 → 1" in result.loc[256, "why"]
    assert result.loc[512, "why"] == "status ok → error (CUDA out of memory)"
    assert "family_ref — → soft_torch" in result.loc[1024, "why"]


def test_only_in_one_run_and_not_measured(tmp_path):
    skipped = row(n=256, impl="opencv", status="skipped", error="cv2 not installed", median_us="")
    base = write_run(tmp_path / "base.csv", [timed(100, 1, n=256), timed(100, 3, n=512), skipped])
    new = write_run(tmp_path / "new.csv", [timed(100, 2, n=256), timed(100, 4, n=4096), skipped])
    result = compare.compare_files(base, new)
    verdicts = dict(zip(zip(result["impl"], result["n"]), result["verdict"]))
    assert verdicts == {("torchvision", 256): "same", ("torchvision", 512): "only in base",
                        ("torchvision", 4096): "only in new", ("opencv", 256): "not measured"}
    assert "cv2 not installed" in result.set_index("impl").loc["opencv", "why"]


def test_rows_without_samples_are_uncertain(tmp_path):
    plain = [{k: v for k, v in timed(100, 1).items() if k != "_samples"}]
    base = write_run(tmp_path / "base.csv", plain)
    new = write_run(tmp_path / "new.csv", [timed(300, 2)])
    result = compare.compare_files(base, new)
    assert result["verdict"].tolist() == ["uncertain"] and "no raw samples in" in result["why"][0]


def test_compare_frames_pairs_read_back_rows_with_their_samples(tmp_path):
    from nmsbench.engine.samples import read_samples

    path = write_run(tmp_path / "run.csv", [timed(100, 1, n=256, overlap=0.7, iou_threshold=0.45)])
    frame, samples = read_results(path), read_samples(path)
    result = compare.compare_frames(frame, frame, samples, samples)
    assert result["verdict"].tolist() == ["same"] and result["p"][0] == pytest.approx(1.0)


def test_bad_input_is_a_value_error(tmp_path):
    run = write_run(tmp_path / "run.csv", [timed(100, 1)])
    other = write_run(tmp_path / "other.csv", [timed(100, 2, n=9999)])
    pipe = write_run(tmp_path / "pipe.csv", [timed(100, 3, benchmark="pipeline", stage="total")])
    twice = write_run(tmp_path / "twice.csv", [timed(100, 4)])
    write_run(tmp_path / "second.csv", [timed(100, 5)], ENV_B)
    (tmp_path / "twice.csv").write_text((tmp_path / "twice.csv").read_text()
                                        + (tmp_path / "second.csv").read_text().split("\n", 1)[1])
    with pytest.raises(ValueError, match="no such results file"):
        compare.compare_files(tmp_path / "missing.csv", run)
    with pytest.raises(ValueError, match="different benchmarks"):
        compare.compare_files(run, pipe)
    with pytest.raises(ValueError, match="nothing to compare"):
        compare.compare_files(run, other)
    with pytest.raises(ValueError, match="more than once"):
        compare.compare_files(twice, run)


# --- the command line ------------------------------------------------------------------------

@pytest.fixture
def pair(tmp_path):
    base = write_run(tmp_path / "base.csv", [timed(100, 1, n=256), timed(100, 3, n=512), timed(100, 5, n=1024)])
    new = write_run(tmp_path / "new.csv", [timed(100, 2, n=256), timed(130, 4, n=512),
                                           timed(100, 6, n=1024, kept=9, missing=1, jaccard=0.9)], ENV_B)
    return str(base), str(new)


def invoke(*args):
    return CliRunner().invoke(compare_command, [str(a) for a in args], catch_exceptions=False)


def test_cli_table_lists_counts_and_the_rows_to_look_at_first(pair):
    out = invoke(*pair)
    assert out.exit_code == 0, out.output
    assert "1 changed, 1 slower, 1 same" in out.output
    assert out.output.index("changed") < out.output.index("slower") < out.output.rindex("same")
    # the two timed pairs' distance from 1 (1.3 and about 1.0): the changed one has no timing verdict
    assert "|NEW / BASE - 1|, median / 90th percentile: wall " in out.output and "(2 pairs)" in out.output


def test_cli_markdown_and_csv(pair):
    md = invoke(*pair, "--format", "markdown").output
    lines = md.splitlines()
    assert lines[0] == "1 changed, 1 slower, 1 same" and lines[2].startswith("| impl |")
    assert [line.split("|")[-3].strip() for line in lines[4:]] == ["changed", "slower", "same"]
    csv = pd.read_csv(__import__("io").StringIO(invoke(*pair, "--format", "csv").output))
    assert list(csv.columns) == compare.OUT_COLUMNS and sorted(csv["verdict"]) == ["changed", "same", "slower"]


def test_cli_fail_on_exits_1_only_for_the_named_verdicts(pair):
    assert invoke(*pair, "--fail-on", "slower,changed").exit_code == 1
    assert invoke(*pair, "--fail-on", "faster").exit_code == 0
    assert invoke(*pair, "--fail-on", "slower", "--threshold", "0.5").exit_code == 0  # +30 % is within ±50 %
    assert invoke(*pair).exit_code == 0


@pytest.mark.parametrize("args, message", [
    (("{tmp}/missing.csv", "{new}"), "no such results file"),
    (("{base}", "{new}", "--fail-on", "slow"), "unknown verdict slow"),
    (("{base}", "{new}", "--threshold", "-1"), "--threshold"),
    (("{base}", "{new}", "--alpha", "1"), "--alpha"),
    (("{base}", "{tmp}/junk.csv"), "not an nmsbench results file"),
])
def test_cli_bad_input_exits_2_with_a_message(pair, tmp_path, args, message):
    (tmp_path / "junk.csv").write_text("a,b\n1,2\n")
    base, new = pair
    out = invoke(*(a.format(tmp=tmp_path, base=base, new=new) for a in args))
    assert out.exit_code == 2 and message in out.output, out.output


def test_the_main_group_has_the_command():
    from nmsbench.cli import main

    assert main.commands["compare"] is compare_command


# --- a real CPU sweep: the slowed copy and an A/A pair ---------------------------------------

def _sweep(out, impl: str) -> None:
    from nmsbench.cli import main

    result = CliRunner().invoke(main, ["sweep", "--impl", impl, "--device", "cpu", "--scenario", "uniform", "--n",
                                       "64,256", "--rounds", "5", "--min-run-time", "0.1", "--threads", "1", "--host-wait", "0.5",
                                       "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_a_slowed_copy_is_slower_and_a_twin_run_not_faster_or_slower(tmp_path):
    """Real sweeps on a shared CPU: the slowed copy takes 4x the time and the A/A band is
    wide, so that no load between two runs can move a verdict (the H200 run measures the
    real A/A and 10 % figures: benchmarks/compare_check.py)."""
    from slowed import slowed

    _sweep(tmp_path / "a.csv", "torchvision")
    _sweep(tmp_path / "b.csv", "torchvision")
    with slowed("torchvision", 3.0):
        _sweep(tmp_path / "slow.csv", "torchvision")
    twin = compare.compare_files(tmp_path / "a.csv", tmp_path / "b.csv", threshold=2.0)
    assert len(twin) == 2 and twin["p"].notna().all()  # paired, with their samples
    assert not twin["verdict"].isin(["faster", "slower", "changed"]).any(), twin
    slow = compare.compare_files(tmp_path / "a.csv", tmp_path / "slow.csv")
    shown = slow[["n", "ratio", "ci_low", "ci_high", "p", "why"]]
    # a host so busy that its rounds disagree may leave a row uncertain, never faster or same
    assert slow["verdict"].isin(["slower", "uncertain"]).all() and slow["verdict"].eq("slower").any(), shown
    assert (slow["ratio"] > 1 + compare.DEFAULT_THRESHOLD).all(), shown


# --- the run-to-run noise: what two runs of one host differ by beyond their own rounds -------

def test_run_drift_is_the_robust_spread_of_the_log_ratios():
    assert compare.run_drift([1.0] * 20) == 0.0
    assert compare.run_drift([1.1] * 3) == 0.0  # too few pairs to tell
    spread = compare.run_drift([math.exp(v) for v in (-0.04, -0.02, 0.0, 0.0, 0.02, 0.04, 0.03, -0.03, 0.01, -0.01)])
    assert 0.02 < spread < 0.05
    # one changed case among many that did not leaves the estimate where the others put it
    assert compare.run_drift([1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 3.0]) < 0.03
    assert compare.run_drift([float("nan"), 0.0, -1.0] + [1.0] * 8) == 0.0
    # pairs beyond the threshold changed (or wandered far): they are not the null, however many
    assert compare.run_drift([1.1, 1.3, 1.7, 2.4, 4.2, 1.12, 1.2, 1.9, 1.0, 1.01]) == 0.0
    assert compare.run_drift([1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01] + [1.2, 1.7, 2.4] * 5) < 0.03


def test_drift_widens_the_interval_and_turns_a_small_shift_uncertain():
    base, new = draws(100, 21), draws(107, 22)  # +7 %: beyond 5 %, tight rounds
    assert compare.judge(base, new)["verdict"] == "slower"
    widened = compare.judge(base, new, drift=0.03)  # two runs of this timer differ by ~3 % anyway
    assert widened["verdict"] == "uncertain", widened
    assert widened["ci_low"] < 1 < widened["ci_high"]
    assert compare.judge(base, draws(130, 23), drift=0.03)["verdict"] == "slower"  # a real change still shows


def test_a_shift_common_to_every_case_is_no_drift_but_a_scattered_one_is(tmp_path):
    # every case 10 % slower (a slowed copy, a slower commit): the shared shift is the answer, not noise
    base = [timed(100, 100 + i, n=64 * 2 ** i) for i in range(10)]
    slower = [timed(110, 200 + i, n=64 * 2 ** i) for i in range(10)]
    write_run(tmp_path / "a.csv", base, ENV_A)
    write_run(tmp_path / "b.csv", slower, ENV_B)
    result = compare.compare_files(tmp_path / "a.csv", tmp_path / "b.csv")
    assert (result["verdict"] == "slower").all(), result[["n", "ratio", "ci_low", "why"]]
    # A/A pairs scattered run to run (within ±2 %, three by ±6 %): the drift of those that stayed keeps the far ones uncalled
    shifts = [0.06, -0.02, 0.01, -0.01, 0.02, 0.0, -0.06, 0.015, -0.015, 0.005, -0.005, 0.06]
    scattered = [timed(100 * (1 + shift), 300 + i, n=64 * 2 ** i) for i, shift in enumerate(shifts)]
    base = [timed(100, 100 + i, n=64 * 2 ** i) for i in range(12)]
    write_run(tmp_path / "a12.csv", base, ENV_A)
    write_run(tmp_path / "c.csv", scattered, ENV_B)
    result = compare.compare_files(tmp_path / "a12.csv", tmp_path / "c.csv")
    assert not result["verdict"].isin(["faster", "slower"]).any(), result[["n", "ratio", "ci_low", "ci_high", "why"]]


def test_a_slow_down_that_varies_across_cases_is_slower_in_every_case(tmp_path):
    # a copy slowed by a fixed extra kernel: +300 % at small N, +11 % at large (the H200's slowed check);
    # the spread of these changed ratios is no run-to-run noise and must not widen their intervals
    factors = [4.2, 2.4, 3.1, 1.9, 1.66, 1.38, 1.28, 1.18, 1.11, 1.13, 1.12, 1.11]
    base = [timed(100, 400 + i, n=64 * 2 ** i) for i in range(len(factors))]
    slower = [timed(100 * f, 500 + i, n=64 * 2 ** i) for i, f in enumerate(factors)]
    write_run(tmp_path / "a.csv", base, ENV_A)
    write_run(tmp_path / "b.csv", slower, ENV_B)
    result = compare.compare_files(tmp_path / "a.csv", tmp_path / "b.csv")
    assert (result["verdict"] == "slower").all(), result[["n", "ratio", "ci_low", "ci_high", "why"]]


def test_a_noisy_run_needs_its_interval_beyond_the_threshold():
    base, new = draws(100, 31), draws(107, 32, drift=0.02)
    clean = compare.judge(base, new)
    assert clean["verdict"] == "slower" and clean["ci_low"] < 1.05, clean
    assert compare.judge(base, new, noisy=True)["verdict"] == "uncertain"


def test_agreement_is_the_median_and_90th_percentile_of_the_ratios_distance_from_one_per_timer():
    """An A/A pair's figure: per timer, |NEW / BASE - 1| over the pairs with a timing verdict
    (changed or one-sided rows have no ratio to count)."""
    import pandas as pd

    from nmsbench import compare

    ratios = [1.01, 0.98, 1.05, 1.20, 0.90]
    result = pd.DataFrame({"timer": ["wall"] * 5 + ["device"] * 2 + ["wall"],
                           "ratio": ratios + [1.002, 0.999, float("nan")],
                           "verdict": ["same", "same", "uncertain", "slower", "faster", "same", "same", "changed"]})
    table = compare.agreement(result).set_index("timer")
    off = pd.Series([abs(r - 1) for r in ratios])
    assert table.loc["wall", "pairs"] == 5 and table.loc["device", "pairs"] == 2
    assert table.loc["wall", "median"] == pytest.approx(off.median())
    assert table.loc["wall", "p90"] == pytest.approx(off.quantile(0.9))
    assert table.loc["device", "median"] == pytest.approx(0.0015)
    line = compare.agreement_line(result)
    assert line.startswith("|NEW / BASE - 1|, median / 90th percentile: ") and "wall 5.0% / " in line
    assert compare.agreement_line(result[result["verdict"] == "changed"]) == ""
