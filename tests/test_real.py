"""The recorded real-detector data and the ``real`` scenario (datasets/real.py, REAL.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from nmsbench import datasets
from nmsbench.cli import main
from nmsbench.datasets import real
from nmsbench.pipeline import decode_numpy
from nmsbench.results import COLUMNS, SCHEMA_VERSION, read_results

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def data():
    return real.load_real()


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# ---------------------------------------------------------------- the recorded file

def test_recorded_file_is_small_and_shipped_as_package_data():
    assert real.DATA.parent == Path(datasets.__file__).parent and real.DATA.is_file()
    assert real.DATA.stat().st_size < 5_000_000
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert {"*.npz", "*.md"} <= set(package_data["nmsbench.datasets"])
    assert (Path(datasets.__file__).parent / "REAL.md").is_file()


def test_recordings_span_the_row_counts_asked_for(data):
    recs = list(data.recordings.values())
    assert {r.image for r in recs} == {"bus.jpg", "zidane.jpg", "astronaut.png", "chelsea.png", "coffee.png"}
    for r in recs:
        assert r.rows == 15 * (r.input_size // 32) ** 2  # YOLOv3-tiny: two heads, three anchors each
        assert r.key == f"{r.image}@{r.input_size}" and r.source and r.licence
    rows = sorted({r.rows for r in recs})
    assert rows[0] <= 2_600 and rows[-1] >= 25_000
    assert real.DEFAULT_RECORDING in data.recordings
    assert [r.key for r in recs if r.has_raw] == ["bus.jpg@640", "zidane.jpg@640"]


def test_recorded_candidates_are_valid(data):
    assert data.floor <= real.FLOOR
    assert len(data.class_names) == 80 and data.class_names[0] == "person"
    for key, rec in data.recordings.items():
        rows, boxes, scores, labels = data.candidates(key)
        assert len(rows) == rec.candidates > 0
        assert boxes.dtype == np.float32 and scores.dtype == np.float32 and labels.dtype == np.int64
        assert np.isfinite(boxes).all() and np.isfinite(scores).all()
        assert (boxes[:, 0] <= boxes[:, 2]).all() and (boxes[:, 1] <= boxes[:, 3]).all()
        assert boxes.min() >= 0 and boxes.max() <= rec.input_size
        assert ((labels >= 0) & (labels <= 79)).all()
        assert (scores >= np.float32(data.floor)).all() and (scores <= 1).all()
        assert (np.diff(rows) > 0).all() and rows.max() < rec.rows


def test_metadata_says_how_it_was_made(data):
    meta = data.meta
    assert "YOLOv3-tiny" in meta["detector"] and "readNetFromDarknet" in meta["detector"]
    assert len(meta["weights_sha256"]) == 64 and "public domain" in meta["weights_licence"]
    assert meta["command"].startswith("python -m nmsbench.datasets.record_real")
    assert meta["opencv"].startswith("4.")


def test_candidates_are_the_pipeline_decode_of_the_stored_raw_rows(data):
    for key, rec in data.recordings.items():
        if not rec.has_raw:
            continue
        raw = data.raw(key)
        assert raw.shape == (rec.rows, 85) and raw.dtype == np.float32
        (decoded,) = decode_numpy(raw[None], data.floor, (rec.input_size, rec.input_size))
        rows, boxes, scores, labels = data.candidates(key)
        np.testing.assert_array_equal(decoded.rows, rows)
        np.testing.assert_array_equal(decoded.boxes, boxes)
        np.testing.assert_array_equal(decoded.scores, scores)
        np.testing.assert_array_equal(decoded.labels, labels)


def test_raw_rows_are_only_where_recorded(data):
    with pytest.raises(ValueError, match="has no raw rows stored; these do: bus.jpg@640, zidane.jpg@640"):
        data.raw("bus.jpg@1312")
    with pytest.raises(ValueError, match="unknown recording 'moon.png@640'"):
        data.candidates("moon.png@640")


def _corrupt(tmp_path, **changes) -> Path:
    with np.load(real.DATA, allow_pickle=False) as source:
        arrays = {k: source[k] for k in source.files}
    meta = json.loads(str(arrays["meta"]))
    for key, fn in changes.items():
        if key == "meta":
            fn(meta)
        else:
            arrays[key] = fn(arrays[key].copy())
    arrays["meta"] = np.array(json.dumps(meta))
    path = tmp_path / f"corrupt-{'-'.join(changes)}.npz"
    np.savez(path, **arrays)
    return path


def _set(index, value):
    def fn(a):
        a[index] = value
        return a
    return fn


@pytest.mark.parametrize("changes, message", [
    ({"cand_boxes": _set((3, 0), np.nan)}, "non-finite boxes"),
    ({"cand_boxes": _set((3, 2), -1.0)}, "x2 < x1"),
    ({"cand_labels": _set(5, 80)}, "labels outside 0..79"),
    ({"cand_scores": _set(0, 2.0)}, "scores outside"),
    ({"cand_offsets": lambda a: a[:-1]}, "do not line up"),
    ({"raw_probs": _set((10, 3), np.float16(1.5))}, "probabilities outside"),
    ({"meta": lambda m: m.pop("weights_sha256")}, "lacks 'weights_sha256'"),
    ({"meta": lambda m: m.update(floor=0.01)}, "above the scenario's lowest threshold"),
])
def test_damaged_files_are_rejected_with_the_reason(tmp_path, changes, message):
    path = _corrupt(tmp_path, **changes)
    with pytest.raises(ValueError, match=message) as info:
        real.load_real(path)
    assert str(path) in str(info.value)


def test_missing_and_foreign_files_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="missing"):
        real.load_real(tmp_path / "nope.npz")
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, boxes=np.zeros((1, 4)))
    with pytest.raises(ValueError, match="missing arrays meta"):
        real.load_real(foreign)
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(ValueError, match="cannot read"):
        real.load_real(garbage)


# ---------------------------------------------------------------- the real scenario

def test_real_scenario_is_deterministic_and_valid():
    a = datasets.generate("real", 512, overlap=0.001, seed=0)
    b = datasets.generate("real", 512, overlap=0.001, seed=7)  # the seed does not matter: it is recorded
    assert torch.equal(a.boxes, b.boxes) and torch.equal(a.scores, b.scores) and torch.equal(a.labels, b.labels)
    assert len(a) == 512 and a.labels.dtype == torch.int64 and a.boxes.dtype == torch.float32
    assert a.meta["scenario"] == "real" and a.meta["recording"] == real.DEFAULT_RECORDING
    assert a.meta["row"] == {"image": "bus.jpg", "input_size": 1312, "n": 512, "n_cap": 512, "classes": 80}


@pytest.mark.parametrize("recording", ["bus.jpg@1312", "chelsea.png@416", "zidane.jpg@640"])
def test_higher_confidence_gives_fewer_boxes_nested(recording):
    previous = None
    for conf in (real.FLOOR, 1e-4, 1e-3, 0.01, 0.05, 0.25, 0.5, 1.0):
        box_set = datasets.generate("real", 100_000, overlap=conf, recording=recording)
        rows = set(box_set.meta["raw_rows"].tolist())
        assert (box_set.scores >= np.float32(conf)).all()
        if previous is not None:
            assert rows <= previous  # nested: raising the threshold only removes boxes
        previous = rows
    lowest = datasets.generate("real", 100_000, overlap=real.FLOOR, recording=recording)
    assert len(lowest) == real.load_real().recordings[recording].candidates


def test_n_caps_by_top_score_and_keeps_raw_row_order():
    full = datasets.generate("real", 100_000, overlap=0.001)
    capped = datasets.generate("real", 100, overlap=0.001)
    assert len(capped) == 100 and capped.meta["capped"] and not full.meta["capped"]
    assert capped.meta["above_threshold"] == len(full)
    rows = capped.meta["raw_rows"]
    assert (np.diff(rows) > 0).all()
    dropped = ~np.isin(full.meta["raw_rows"], rows)
    assert capped.scores.min() >= full.scores[torch.from_numpy(dropped)].max()
    assert len(datasets.generate("real", 0, overlap=0.001)) == 0


def test_real_scenario_arguments_are_checked():
    with pytest.raises(ValueError, match="unknown recording"):
        datasets.generate("real", 10, recording="bus.jpg@999")
    with pytest.raises(ValueError, match="must be in"):
        datasets.generate("real", 10, overlap=1e-7)
    with pytest.raises(ValueError, match="only for scenarios that replay recordings"):
        datasets.generate("uniform", 10, recording="bus.jpg@640")
    assert datasets.SCENARIOS["real"].recordings() == list(real.load_real().recordings)


# ---------------------------------------------------------------- sweeps over it

def test_sweep_over_the_real_scenario(tmp_path):
    out = tmp_path / "real.csv"
    result = run("sweep", "--scenario", "real", "--n", "64,4096,8192", "--overlap", "0.001,0.25",
                 "--impl", "torchvision,bitmask_two_phase,allpairs", "--recording", "bus.jpg@640,chelsea.png@1312",
                 "--min-run-time", "0.01", "--threads", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert list(frame.columns) == COLUMNS and (frame.schema_version == SCHEMA_VERSION).all()
    assert len(frame) == 3 * 2 * 2 * 3 and set(frame.benchmark) == {"nms"}
    assert set(frame.image) == {"bus.jpg", "chelsea.png"} and set(frame.input_size) == {640, 1312}
    assert set(frame.n_cap) == {64, 4096, 8192} and (frame.n <= frame.n_cap).all() and (frame.classes == 80).all()
    ok = frame[frame.status == "ok"]
    assert (ok[ok.impl != "allpairs"].jaccard == 1.0).all()  # exact variants agree on real boxes
    # beyond the candidates there are, a larger cap is the same box set: recorded as skipped, not re-timed
    skipped = frame[frame.status == "skipped"]
    assert len(skipped) and skipped.error.str.contains("same box set as n_cap=").all()
    assert set(frame[frame.n_cap == 64].status) == {"ok"} and set(frame[frame.n_cap == 8192].status) == {"skipped"}
    bus = frame[(frame.image == "bus.jpg") & (frame.n_cap == 4096)]
    assert (bus[bus.overlap == 0.25].n.to_numpy() < bus[bus.overlap == 0.001].n.to_numpy()).all()
    meta = json.loads(out.with_suffix(".json").read_text())
    assert "--recording bus.jpg@640,chelsea.png@1312" in meta["command"]


def test_sweep_recording_options_are_checked(tmp_path):
    out = str(tmp_path / "x.csv")
    bad = run("sweep", "--scenario", "real", "--recording", "moon.png@640", "--out", out)
    assert bad.exit_code == 2 and "unknown moon.png@640" in bad.output
    lonely = run("sweep", "--scenario", "uniform", "--recording", "bus.jpg@640", "--out", out)
    assert lonely.exit_code == 2 and "--recording is for the real scenario" in lonely.output
    everything = run("sweep", "--scenario", "real", "--recording", "all", "--n", "16", "--impl", "torchvision",
                     "--min-run-time", "0.001", "--out", out)
    assert everything.exit_code == 0, everything.output
    assert len(pd.read_csv(out)) == len(real.load_real().recordings)


def test_committed_schema_1_results_still_load():
    sweeps = [p for p in sorted((REPO / "results").rglob("*.csv"))  # the shelf and archive/
              if "pipeline" not in p.name and "accuracy" not in p.name and "conformance" not in p.name]
    assert len(sweeps) >= 10, sweeps  # the reference sweeps and the archived ones
    for path in sweeps:
        frame = read_results(path)
        assert set(COLUMNS) <= set(frame.columns)
        assert set(frame.benchmark) == {"nms"} and frame.stage.isna().all()
