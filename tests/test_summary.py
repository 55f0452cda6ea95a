"""The end-of-run summary (nmsbench.summary): the verdict lines first, from clean rows only;
noisy cells marked with a footnote naming the reasons; the skipped implementations listed
with their reasons; AP in % in the accuracy summary. Synthetic rows, no timing, except one
tiny CLI sweep that checks the order and that noisy rows are a count, not lines."""

from __future__ import annotations

import re

import pandas as pd
from click.testing import CliRunner

from nmsbench import summary
from nmsbench.cli import main

BASE = {"schema_version": 8, "benchmark": "nms", "device": "cpu", "dtype": "float32", "timer": "wall", "overlap": 0.25,
        "classes": 1, "iou_threshold": 0.5, "seed": 0, "params": "{}", "status": "ok", "noisy": False, "noise": ""}
FAMILY = {"torchvision": "hard", "fast_exact": "hard", "slow_exact": "hard", "fast_inexact": "hard",
          "matrix_a": "matrix", "matrix_b": "matrix", "lone_soft": "soft"}
EXACT = {"torchvision", "fast_exact", "slow_exact"}


def row(impl, n, us, scenario="uniform", **more) -> dict:
    return BASE | {"impl": impl, "family": FAMILY.get(impl, "hard"), "scenario": scenario, "n": n, "median_us": us} | more


def text_of(rows, benchmark="nms", counts=None) -> str:
    counts = counts or {"ok": len(rows), "error": 0, "skipped": 0, "noisy": 0}
    with summary.console.capture() as captured:
        summary.show(benchmark, rows, counts, summary.Path("r.csv"), exact=EXACT.__contains__)
    return " ".join(captured.get().split())


def verdicts(rows) -> list[str]:
    return [" ".join(line.split()) for line in summary.verdict_lines(summary.frame_of(rows), EXACT.__contains__)]


def test_the_verdict_names_the_fastest_exact_hard_and_its_speedup_at_the_smallest_and_largest_n():
    rows = [row("torchvision", 64, 100.0), row("fast_exact", 64, 50.0), row("slow_exact", 64, 80.0),
            row("torchvision", 256, 400.0), row("fast_exact", 256, 200.0), row("slow_exact", 256, 100.0),
            row("torchvision", 128, 1.0), row("fast_exact", 128, 0.5),  # between the ends: no verdict
            row("fast_inexact", 64, 10.0), row("fast_inexact", 256, 10.0)]  # faster, but not exact
    lines = verdicts(rows)
    assert lines[1] == "uniform · cpu · wall timer:"
    assert lines[2] == ("fastest exact hard: N=64 fast_exact 50.0 µs, 2.00x torchvision; "
                        "N=256 slow_exact 100.0 µs, 4.00x torchvision")
    # the hard family has an inexact entry: its own line says so
    assert lines[3] == ("fastest hard (exact or not): N=64 fast_inexact (not exact) 10.0 µs, 10.00x torchvision; "
                        "N=256 fast_inexact (not exact) 10.0 µs, 40.00x torchvision")


def test_a_noisy_row_never_answers_and_no_clean_row_is_said():
    rows = [row("torchvision", 64, 100.0), row("fast_exact", 64, 50.0, noisy=True, noise="IQR 40% of the median"),
            row("slow_exact", 64, 80.0),
            row("torchvision", 256, 400.0, noisy=True), row("fast_exact", 256, 200.0, noisy="True"),
            row("slow_exact", 256, 300.0, noisy=True),
            row("torchvision", 64, 9.0, scenario="crowd", noisy=True)]
    lines = verdicts(rows)
    uniform = lines.index("uniform · cpu · wall timer:")
    assert lines[uniform + 1] == "fastest exact hard: N=64 slow_exact 80.0 µs, 1.25x torchvision; N=256 no clean row"
    crowd = lines.index("crowd · cpu · wall timer:")
    assert lines[crowd + 1] == "no clean row (1 ok row(s), all noisy)"


def test_torchvision_noisy_or_absent_leaves_the_speedup_out_and_says_why():
    rows = [row("torchvision", 64, 100.0, noisy=True), row("fast_exact", 64, 50.0), row("fast_exact", 256, 70.0)]
    line = verdicts(rows)[2]
    assert line == ("fastest exact hard: N=64 fast_exact 50.0 µs (torchvision: no clean row); "
                    "N=256 fast_exact 70.0 µs (no torchvision row)")
    itself = verdicts([row("torchvision", 64, 10.0), row("slow_exact", 64, 80.0)])[2]
    assert itself == "fastest exact hard: N=64 torchvision 10.0 µs (torchvision itself)"
    # an inexact hard entry that is not the fastest: the hard family's line would repeat the exact one
    assert len(verdicts([row("torchvision", 64, 10.0), row("fast_inexact", 64, 80.0)])) == 3


def test_each_family_with_several_entries_gets_its_line_and_a_lone_one_none():
    rows = [row("torchvision", 64, 100.0), row("torchvision", 256, 400.0),
            row("matrix_a", 64, 300.0), row("matrix_b", 64, 200.0), row("matrix_a", 256, 500.0), row("matrix_b", 256, 800.0),
            row("lone_soft", 64, 1.0), row("lone_soft", 256, 1.0)]
    lines = verdicts(rows)
    assert ("fastest matrix: N=64 matrix_b (not exact) 200.0 µs, 0.50x torchvision; "
            "N=256 matrix_a (not exact) 500.0 µs, 0.80x torchvision") in lines
    assert not any("soft" in line for line in lines)
    # one implementation with two parameter sets is two entries, named by their parameters
    rows = [row("torchvision", 64, 100.0), row("matrix_a", 64, 300.0, params='{"kernel": "linear"}'),
            row("matrix_a", 64, 250.0, params='{"kernel": "gaussian"}')]
    assert "fastest matrix: N=64 matrix_a kernel=gaussian (not exact) 250.0 µs, 0.40x torchvision" in verdicts(rows)


def test_every_timer_and_device_gets_its_own_verdict_block():
    rows = [row("torchvision", 64, 100.0), row("fast_exact", 64, 50.0),
            row("torchvision", 64, 10.0, device="cuda", timer="device"), row("fast_exact", 64, 20.0, device="cuda", timer="device")]
    lines = verdicts(rows)
    assert "uniform · cpu · wall timer:" in lines and "uniform · cuda · device timer:" in lines
    assert "fastest exact hard: N=64 torchvision 10.0 µs (torchvision itself)" in lines


def test_the_summary_opens_with_the_verdict_then_marks_noisy_cells_with_a_footnote_and_lists_skipped():
    rows = [row("torchvision", 64, 100.0), row("fast_exact", 64, 1234.5, noisy=True,
                                                noise="IQR 40% of the median; the host ran slow in 3 of 5 rounds"),
            row("slow_exact", 64, 80.0, noisy=True, noise="IQR 12% of the median"),
            row("opencv", 64, float("nan"), status="skipped", error="opencv needs cv2: pip install '.[externals]'"),
            row("opencv", 256, float("nan"), status="skipped", error="opencv needs cv2: pip install '.[externals]'"),
            row("soft_rounds", 64, float("nan"), status="skipped", error="soft_rounds has no cpu backend")]
    text = text_of(rows, counts={"ok": 3, "error": 0, "skipped": 3, "noisy": 2})
    assert text.index("verdict") < text.index("median µs (wall timer)") < text.index("† noisy")
    assert "1,234.5†" in text and "80.0†" in text and "100.0†" not in text
    assert ("† noisy, its time less certain: IQR 12–40% of the median (2 rows); "
            "the host ran slow in 3 of 5 rounds (1 row)") in text
    assert "warning: 2 noisy row(s), marked † above" in text
    assert "skipped: 2 implementation(s), 3 row(s):" in text
    assert "opencv (cpu): opencv needs cv2: pip install '.[externals]' (2 rows)" in text
    assert "soft_rounds (cpu): soft_rounds has no cpu backend (1 row)" in text


def test_a_clean_run_has_neither_marks_nor_footnote():
    text = text_of([row("torchvision", 64, 100.0), row("fast_exact", 64, 50.0)])
    assert "†" not in text and "noisy row" not in text and "skipped:" not in text


def test_recorded_cells_are_marked_too():
    rows = [row("torchvision", 57, 100.0, scenario="real", image="bus.jpg", input_size=640, n_cap=64, noisy=True,
                noise="IQR 30% of the median")]
    assert "100.0 (N=57)†" in text_of(rows)


def test_pipeline_and_accuracy_summaries_mark_noisy_cells_and_print_ap_in_percent(monkeypatch):
    pipe = {"benchmark": "pipeline", "overlap": 0.25}
    rows = [row("numpy", 6000, 200.0, "real", **pipe, batch=2, stage="nms", noisy=True, noise="IQR 30% of the median"),
            row("numpy", 6000, 300.0, "real", **pipe, batch=2, stage="total"),
            row("numpy", 6000, 800.0, "real", **pipe, batch=4, stage="nms")]
    text = text_of(rows, "pipeline")
    assert "100.0†" in text and "150.0 │" in text and "200.0 │" in text and "verdict" not in text
    assert "† noisy, its time less certain: IQR 30% of the median (1 row)" in text

    monkeypatch.setattr("nmsbench.accuracy.evaluator_name", lambda: "test evaluator")
    acc = {"benchmark": "accuracy", "images": 6, "ap50": 0.9, "ar100": 0.7, "ar100_crowded": 0.5}
    rows = [row("torchvision", 600, 12.5, "coco", **acc, ap=0.4567),
            row("soft_nms", 600, 99.0, "coco", **acc, ap=0.5, noisy=True, noise="IQR 20% of the median")]
    text = text_of(rows, "accuracy")
    assert "45.7" in text and "50.0" in text and "90.0" in text and "0.457" not in text
    assert "99.0†" in text and "12.5†" not in text and "metrics in %" in text


def test_a_sweep_prints_the_verdict_first_and_noisy_rows_as_a_count_unless_verbose(tmp_path, monkeypatch):
    from nmsbench import timing

    # every row noisy, whatever the machine: the noisy rule itself is test_noisy's
    monkeypatch.setattr(timing.Timing, "noise", property(lambda self: "IQR 50% of the median"))
    args = ["sweep", "--n", "8,16", "--impl", "torchvision,hard_fused", "--scenario", "uniform", "--device", "cpu",
            "--min-run-time", "0.005", "--rounds", "1", "--threads", "1"]
    quiet = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "a.csv")])
    assert quiet.exit_code == 0, quiet.output
    text = " ".join(quiet.output.split())
    assert text.index("verdict (clean rows only") < text.index("median µs (wall timer) · uniform")
    assert "uniform · cpu · wall timer: no clean row (4 ok row(s), all noisy)" in text
    assert not re.search(r"^noisy ", quiet.output, re.M) and "4 noisy" in text
    assert len(re.findall(r"\d†", text)) == 4
    loud = CliRunner().invoke(main, [*args, "--verbose", "--out", str(tmp_path / "b.csv")])
    assert loud.exit_code == 0, loud.output
    assert len(re.findall(r"^noisy torchvision cpu", loud.output, re.M)) == 2
    assert set(pd.read_csv(tmp_path / "b.csv")["noisy"]) == {True}


def test_a_run_says_where_its_time_went(tmp_path, monkeypatch):
    """The sidecar's "time" note and the last lines: the run's seconds split into timing,
    preparing (warm-up, output checks) and the rest, adding up to the whole. Each of the
    four cases' preparation is made to last 0.1 s more (a sleep: a lower bound however
    fast the machine), so the preparing share is known to be there."""
    import json
    import time

    from click.testing import CliRunner

    from nmsbench.cli import main
    from nmsbench.engine import rounds

    within_budget = rounds._within_budget

    def slower(contender, settings, work):
        time.sleep(0.1)
        return within_budget(contender, settings, work)

    monkeypatch.setattr(rounds, "_within_budget", slower)
    out = tmp_path / "t.csv"
    result = CliRunner().invoke(main, ["sweep", "--impl", "torchvision,soft_torch", "--n", "16,64", "--scenario", "uniform",
                                       "--timer", "wall,api", "--rounds", "2", "--min-run-time", "0.05", "--threads", "1",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    spent = json.loads(out.with_suffix(".json").read_text())["time"][0]
    assert spent["timed_s"] >= 8 * 0.05 * 0.9  # eight rows of at least --min-run-time each (the clock's own rounding aside)
    # each timer's share: both timed four rows, and the shares add up to the timing
    assert set(spent["timers_s"]) == {"wall", "api"} and min(spent["timers_s"].values()) >= 4 * 0.05 * 0.9
    assert abs(sum(spent["timers_s"].values()) - spent["timed_s"]) <= 0.2
    assert f"wall {spent['timers_s']['wall']:,.0f} s, api {spent['timers_s']['api']:,.0f} s" in result.output
    assert spent["prepared_s"] >= 0.3  # four preparations of at least 0.1 s each (rounded to 0.1 s)
    assert abs(spent["timed_s"] + spent["prepared_s"] + spent["other_s"] - spent["total_s"]) <= 0.2
    assert f"took {spent['total_s']:,.0f} s: {spent['timed_s']:,.0f} s timing" in result.output


def test_a_cluster_run_says_its_time_went_to_start_up_and_the_workers_cases():
    """The driver's clock times no case of a cluster run: its took line gives the cluster's
    start, the workers' warm-up and the cases' span and task seconds (the sidecar's note)."""
    rows = [row("torchvision", 64, 100.0), row("fast_exact", 64, 50.0)]
    counts = {"ok": 2, "error": 0, "skipped": 0, "noisy": 0, "time": {"total_s": 12.3, "timed_s": 0.0, "prepared_s": 0.0,
                                                                       "other_s": 12.3},
              "cluster": {"spec": "local:2", "workers": [{"address": "a"}, {"address": "b"}], "task_s": 14.0,
                          "connect_s": 5.25, "warm_s": 4.0, "cases_s": 7.5}}
    text = text_of(rows, counts=counts)
    assert ("took 12 s on local:2 (after 5.2 s reaching or starting it): 4.0 s warming its workers, 7.5 s for the "
            "cases, 14 s inside their tasks on 2 worker(s)") in text
    assert "0 s timing" not in text
    del counts["cluster"]["task_s"]  # an accuracy run's note: its batches' tasks are not summed
    assert "7.5 s for the cases on 2 worker(s)" in text_of(rows, counts=counts)


def test_a_local_cluster_that_asks_more_cores_than_the_machine_has_is_warned_of(monkeypatch):
    from nmsbench import progress

    monkeypatch.setattr(progress, "usable_cpus", lambda: [0, 1, 2, 3])
    warned = progress._local_cluster_warning({"cluster": "local:2", "devices": ["cpu"], "threads": 4})
    assert "2 local workers x --threads 4 time CPU rows on up to 8 cores of this machine's 4" in warned
    assert "--threads 2" in warned
    assert progress._local_cluster_warning({"cluster": "local:2", "devices": ["cpu"], "threads": 2}) == ""
    assert progress._local_cluster_warning({"cluster": "local:8", "devices": ["cuda"], "threads": 4}) == ""
    assert progress._local_cluster_warning({"cluster": "tcp://h:8786", "devices": ["cpu"], "threads": 16}) == ""


def test_a_resumed_run_counts_only_its_own_grid_as_there_before(tmp_path):
    """--resume into a file that holds another grid's rows too: the summary says how many of
    this grid's rows were there, never a file total made from them."""
    out = tmp_path / "r.csv"
    common = ["sweep", "--impl", "torchvision", "--scenario", "uniform", "--timer", "wall", "--rounds", "1",
              "--min-run-time", "0.01", "--threads", "1", "--out", str(out)]
    first = CliRunner().invoke(main, [*common, "--n", "16,32"])
    assert first.exit_code == 0, first.output
    other = CliRunner().invoke(main, [*common, "--n", "64", "--resume", str(out)])
    assert other.exit_code == 0, other.output
    assert "(0 already there)" in other.output  # the file holds 2 rows, of another grid
    assert "wrote 1 rows to" in other.output and "were there before" not in other.output
    more = CliRunner().invoke(main, [*common, "--n", "16,32,128", "--resume", str(out)])
    assert more.exit_code == 0, more.output
    assert "(2 already there)" in " ".join(more.output.split())  # of its three cases; the file holds three rows
    assert "wrote 1 rows to" in " ".join(more.output.split())
    assert "(2 more of this grid were there before)" in " ".join(more.output.split())
    assert len(pd.read_csv(out)) == 4
