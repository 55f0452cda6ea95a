"""The accuracy benchmark's core (nmsbench.accuracy, nmsbench.datasets.scenes): scoring,
sources, validation, per-image NMS, on the CPU."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmsbench import accuracy
from nmsbench.accuracy import (AccuracySource, ImageCandidates, coco_metrics, coco_source, crowded_images, detect,
                               load_annotations, synthetic_source)
from nmsbench.datasets.scenes import KINDS, generate_scenes
from nmsbench.registry import implementations
from nmsbench.results import ADDED_IN_SCHEMA_8, COLUMNS, read_results

EVALUATORS = ("faster-coco-eval", "pycocotools")


@pytest.fixture(params=EVALUATORS)
def evaluator(request, monkeypatch):
    """Each COCO evaluator in turn (the fallback, pycocotools, forced by name)."""
    pytest.importorskip(request.param.replace("-", "_"))
    monkeypatch.setattr(accuracy, "evaluator_name", lambda: request.param)
    return request.param


def ground_truth(boxes_by_image: dict[int, list[list[float]]], category: int = 1) -> dict:
    """A COCO ground truth from {image id: [[x, y, w, h], ...]}, one category."""
    annotations = [{"id": k + 1, "image_id": image_id, "category_id": category, "bbox": bbox, "area": bbox[2] * bbox[3],
                    "iscrowd": 0}
                   for k, (image_id, bbox) in enumerate((i, b) for i, bs in boxes_by_image.items() for b in bs)]
    return {"images": [{"id": i} for i in boxes_by_image], "categories": [{"id": category}], "annotations": annotations}


def test_a_fixture_scored_by_hand(evaluator):
    # Two images, three objects (A, B on image 1; C on image 2), one category. The
    # detections, by score: A exactly (true positive), a box on image 2 far from C (false
    # positive), C exactly (true positive), A again (a duplicate: false positive). B is
    # missed. Every true positive has IoU 1 and every false positive IoU 0 with the
    # objects, so all ten IoU thresholds of AP@[.5:.95] count the same matches.
    a, b, c = [0, 0, 100, 100], [200, 200, 50, 50], [10, 10, 80, 40]
    gt = ground_truth({1: [a, b], 2: [c]})
    rows = np.array([[1, *a, 0.9, 1], [2, 300, 300, 20, 20, 0.8, 1], [2, *c, 0.7, 1], [1, *a, 0.6, 1]], dtype=float)
    # (recall, precision) after each detection: (1/3, 1), (1/3, 1/2), (2/3, 2/3), (2/3, 1/2).
    # COCO interpolates: at recall r the precision is the best at any recall >= r, read at
    # the 101 recalls 0, 0.01, ..., 1. r = 0 .. 0.33 (34 points): 1; r = 0.34 .. 0.66
    # (33 points): 2/3; r = 0.67 .. 1 (34 points): never reached, 0.
    expected_ap = (34 * 1 + 33 * (2 / 3) + 34 * 0) / 101
    metrics = coco_metrics(gt, rows)
    assert metrics["ap"] == pytest.approx(expected_ap, abs=1e-9)
    assert metrics["ap50"] == pytest.approx(expected_ap, abs=1e-9) and metrics["ap75"] == pytest.approx(expected_ap, abs=1e-9)
    assert metrics["ar100"] == pytest.approx(2 / 3, abs=1e-9)  # two of three objects found, at every threshold
    assert math.isnan(metrics["ar100_crowded"])  # no crowded image asked for


def test_a_localisation_error_counts_at_the_strict_thresholds_only(evaluator):
    # one object, one detection shifted so that IoU = 80 / 120 = 2/3: a match at IoU
    # thresholds 0.50, 0.55, 0.60, 0.65 (4 of the 10), none from 0.70 on
    gt = ground_truth({1: [[0, 0, 100, 100]]})
    metrics = coco_metrics(gt, np.array([[1, 20, 0, 100, 100, 0.9, 1]], dtype=float))
    assert metrics["ap50"] == pytest.approx(1.0) and metrics["ap75"] == 0.0
    assert metrics["ap"] == pytest.approx(4 / 10) and metrics["ar100"] == pytest.approx(4 / 10)


def test_detections_identical_to_the_ground_truth_score_one_and_none_score_zero(evaluator):
    source = synthetic_source("scenes-clustered", images=12, seed=3)
    gt = source.ground_truth
    perfect = np.array([[a["image_id"], *a["bbox"], 1.0, a["category_id"]] for a in gt["annotations"]], dtype=float)
    crowded = source.crowded
    assert crowded  # clustered scenes have crowded images
    metrics = coco_metrics(gt, perfect, crowded)
    assert all(metrics[m] == pytest.approx(1.0) for m in accuracy.METRICS)
    empty = coco_metrics(gt, np.empty((0, 7)), crowded)
    assert all(empty[m] == 0.0 for m in accuracy.METRICS)


def test_every_hard_implementation_gives_the_same_metrics():
    source = synthetic_source("scenes-crowd", images=15, seed=1)
    hard = sorted(name for name, impl in implementations().items()
                  if impl.family == "hard" and "cpu" in impl.backends and impl.backends["cpu"].availability()[0])
    assert {"torchvision", "hard_fused", "cluster", "hard_graph"} <= set(hard)
    reference = detect("torchvision", source, 0.5)
    expected = coco_metrics(source.ground_truth, reference.rows, source.crowded)
    for name in hard:
        result = detect(name, source, 0.5)
        assert result.kept == reference.kept, name
        np.testing.assert_array_equal(result.rows, reference.rows, err_msg=name)
        assert coco_metrics(source.ground_truth, result.rows, source.crowded) == expected, name


def test_results_do_not_depend_on_the_order_of_the_images():
    source = synthetic_source("scenes-sparse", images=20, seed=2)
    shuffled = AccuracySource(source.name, [source.images[k] for k in np.random.default_rng(0).permutation(20)],
                              source.ground_truth, source.source_params, crowded=source.crowded)
    for name in ("torchvision", "soft_nms"):
        first, second = detect(name, source, 0.5), detect(name, shuffled, 0.5)
        assert not np.array_equal(first.rows[:, 0], second.rows[:, 0])  # processed in another order
        assert coco_metrics(source.ground_truth, first.rows, source.crowded) == \
            coco_metrics(source.ground_truth, second.rows, source.crowded)


def test_detections_are_capped_per_image_by_final_score():
    scenes_source = synthetic_source("scenes-crowd", images=4, seed=0)
    result = detect("soft_nms", scenes_source, 0.5, max_det=10)
    per_image = np.bincount(result.rows[:, 0].astype(int))
    assert per_image.max() == 10 and result.kept > len(result.rows)
    for image_id in np.unique(result.rows[:, 0]):
        scores = result.rows[result.rows[:, 0] == image_id, 5]
        assert (np.diff(scores) <= 0).all()
        # the 10 best final scores of what Soft-NMS kept on that image
        im = scenes_source.images[int(image_id) - 1]
        full = accuracy.run_nms("soft_nms", im.boxes, im.scores, 0.5, labels=im.labels)
        np.testing.assert_allclose(scores, np.sort(full.scores.double().numpy())[::-1][:10])


def test_weighted_nms_is_scored_on_its_moved_boxes():
    source = synthetic_source("scenes-sparse", images=5, seed=0)
    moved, greedy = detect("weighted_nms", source, 0.5), detect("torchvision", source, 0.5)
    assert moved.kept == greedy.kept
    assert not np.array_equal(moved.rows[:, 1:5], greedy.rows[:, 1:5])
    np.testing.assert_array_equal(moved.rows[:, 5], greedy.rows[:, 5])  # the same scores


def test_crowded_images_are_those_with_overlapping_objects_of_one_category():
    gt = {"images": [{"id": i} for i in (1, 2, 3, 4)], "categories": [{"id": 1}, {"id": 2}],
          "annotations": [
              # image 1: IoU 50 / 150 = 1/3 > 0.3, one category: crowded
              {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 100, 100]},
              {"id": 2, "image_id": 1, "category_id": 1, "bbox": [50, 0, 100, 100]},
              # image 2: the same boxes, two categories: not crowded
              {"id": 3, "image_id": 2, "category_id": 1, "bbox": [0, 0, 100, 100]},
              {"id": 4, "image_id": 2, "category_id": 2, "bbox": [50, 0, 100, 100]},
              # image 3: IoU 20 / 180 = 0.11: not crowded
              {"id": 5, "image_id": 3, "category_id": 1, "bbox": [0, 0, 100, 100]},
              {"id": 6, "image_id": 3, "category_id": 1, "bbox": [80, 0, 100, 100]},
          ]}
    assert crowded_images(gt) == [1]
    assert accuracy.CROWDED_IOU == 0.3


def test_the_synthetic_kinds_differ_in_crowding():
    crowded = {kind: len(synthetic_source(kind, images=40, seed=0).crowded) / 40 for kind in KINDS}
    assert crowded["scenes-sparse"] < crowded["scenes-clustered"] < crowded["scenes-crowd"] == 1.0


def test_in_crowds_greedy_nms_loses_objects_that_soft_nms_keeps():
    source = synthetic_source("scenes-crowd", images=60, seed=0)
    greedy = coco_metrics(source.ground_truth, detect("torchvision", source, 0.5).rows, source.crowded)
    soft = coco_metrics(source.ground_truth, detect("soft_nms", source, 0.5, {"kernel": "linear"}).rows, source.crowded)
    assert soft["ar100"] > greedy["ar100"] + 0.01
    assert soft["ap"] > greedy["ap"]


@settings(max_examples=25)
@given(kind=st.sampled_from(sorted(KINDS)), images=st.integers(1, 6), seed=st.integers(0, 2**32))
def test_scenes_are_deterministic_and_inside_their_images(kind, images, seed):
    scenes, again = generate_scenes(kind, images, seed), generate_scenes(kind, images, seed)
    for name in ("gt_boxes", "gt_labels", "gt_image", "boxes", "scores", "labels", "image"):
        np.testing.assert_array_equal(getattr(scenes, name), getattr(again, name))
    size, classes = scenes.model.image_size, scenes.model.classes
    for boxes in (scenes.boxes, scenes.gt_boxes):
        assert ((boxes >= 0) & (boxes <= size)).all()
        assert (boxes[:, 2] >= boxes[:, 0]).all() and (boxes[:, 3] >= boxes[:, 1]).all()
    assert ((scenes.scores > 0) & (scenes.scores <= 1)).all()
    assert ((scenes.labels >= 1) & (scenes.labels <= classes)).all()
    assert (np.diff(scenes.image) >= 0).all() and ((scenes.image >= 0) & (scenes.image < images)).all()


def test_the_noise_model_does_what_its_parameters_say():
    exact = dataclasses.replace(KINDS["scenes-crowd"], jitter=0.0, shared_jitter=0.0, score_noise=0.0, miss_rate=0.0,
                                confusion=0.0, false_positives=0.0)
    source = synthetic_source("scenes-crowd", images=10, seed=4, model=exact)
    assert json.loads(source.source_params)["jitter"] == 0.0
    # every candidate is its object's box: greedy NMS above the neighbours' overlap (at most
    # 0.6 in a crowd) keeps one per object, a perfect score; at 0.5 it removes true neighbours
    objects = len(source.ground_truth["annotations"])
    result = detect("torchvision", source, 0.7)
    assert result.kept == objects < source.n
    assert coco_metrics(source.ground_truth, result.rows)["ap"] == pytest.approx(1.0)
    assert detect("torchvision", source, 0.5).kept < objects
    missed = dataclasses.replace(exact, miss_rate=1.0)
    assert synthetic_source("scenes-crowd", images=10, seed=4, model=missed).n == 0
    background = generate_scenes("scenes-crowd", 10, 4, dataclasses.replace(missed, false_positives=5.0))
    assert len(background.boxes) > 0 and (background.scores <= missed.false_positive_score).all()


def test_another_seed_gives_other_scenes_and_the_source_records_its_noise_model():
    a, b = synthetic_source("scenes-sparse", 5, seed=0), synthetic_source("scenes-sparse", 5, seed=1)
    assert a.n != b.n or not torch.equal(a.images[0].boxes, b.images[0].boxes)
    params = json.loads(a.source_params)
    assert params["layout"] == "uniform" and params["jitter"] == KINDS["scenes-sparse"].jitter
    assert set(params) >= {"candidates", "confusion", "false_positives", "miss_rate", "score_falloff", "shared_jitter"}


def test_bad_scene_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown scene kind"):
        generate_scenes("scenes-nowhere", 5)
    with pytest.raises(ValueError, match="images must be a positive"):
        generate_scenes("scenes-sparse", 0)


# --- COCO files


def write_coco(tmp_path, annotations: dict, candidates: list) -> tuple:
    a, c = tmp_path / "instances.json", tmp_path / "preds.json"
    a.write_text(json.dumps(annotations))
    c.write_text(json.dumps(candidates))  # NaN is written as NaN, which Python's json reads back
    return c, a


ANNOTATIONS = {"images": [{"id": 7}, {"id": 9}], "categories": [{"id": 1}, {"id": 3}],
               "annotations": [{"id": 1, "image_id": 7, "category_id": 1, "bbox": [10, 10, 50, 50]},
                               {"id": 2, "image_id": 9, "category_id": 3, "bbox": [0, 0, 20, 40]}]}
GOOD = {"image_id": 7, "category_id": 1, "bbox": [10, 10, 50, 50], "score": 0.9}


@pytest.mark.parametrize("bad, field, says", [
    ({"image_id": 8}, "image_id", "is not an image of instances.json"),
    ({"category_id": 2}, "category_id", "is not a category of instances.json"),
    ({"bbox": [1, 2, 3]}, "bbox", "4 numbers"),
    ({"bbox": [1, 2, -3, 4]}, "bbox", "width and height must be >= 0"),
    ({"bbox": [1, "2", 3, 4]}, "bbox", "finite numbers"),
    ({"score": float("nan")}, "score", "finite number"),
    ({"score": None}, "score", "finite number"),
    ({"score": 1e300}, "score", "within float32"),
    ({"image_id": 2**63}, "image_id", "whole number from -2**53 to 2**53, got 9223372036854775808"),
    ({"category_id": [1]}, "category_id", "whole number from -2**53 to 2**53, got [1]"),
    ({"bbox": [1, 2, 10**400, 4]}, "bbox", "finite numbers"),
    ({"bbox": [1e38, 2, 3e38, 4]}, "bbox", "does not fit in float32"),
])
def test_bad_candidates_name_the_file_the_entry_and_the_field(tmp_path, bad, field, says):
    candidates, annotations = write_coco(tmp_path, ANNOTATIONS, [GOOD, GOOD, GOOD | bad])
    with pytest.raises(ValueError) as error:
        coco_source(candidates, annotations)
    message = str(error.value)
    assert "preds.json" in message and "entry 2" in message and f"'{field}'" in message and says in message


@pytest.mark.parametrize("image_id, category", [(2**53, -2**53), (-7, 2**31 + 5), (0, 0)])
def test_ids_up_to_2_to_the_53_are_scored_exactly(tmp_path, evaluator, image_id, category):
    # detection rows carry ids as float64: up to 2**53 every id is exact, and both evaluators
    # match each detection to its own image (a neighbouring id holds a second object)
    annotations = {"images": [{"id": image_id}, {"id": image_id - 1}], "categories": [{"id": category}],
                   "annotations": [{"id": 1, "image_id": image_id, "category_id": category, "bbox": [0, 0, 10, 10]},
                                   {"id": 2, "image_id": image_id - 1, "category_id": category, "bbox": [0, 0, 10, 10]}]}
    candidates, annotations = write_coco(tmp_path, annotations, [
        {"image_id": i, "category_id": category, "bbox": [0, 0, 10, 10], "score": 0.9} for i in (image_id, image_id - 1)])
    source = coco_source(candidates, annotations)
    rows = detect("torchvision", source, 0.5).rows
    assert coco_metrics(source.ground_truth, rows)["ap"] == pytest.approx(1.0)


def test_a_candidate_without_a_field_is_named(tmp_path):
    candidates, annotations = write_coco(tmp_path, ANNOTATIONS, [{k: v for k, v in GOOD.items() if k != "score"}])
    with pytest.raises(ValueError, match=r"preds.json: entry 0, field 'score': missing"):
        coco_source(candidates, annotations)


@pytest.mark.parametrize("change, says", [
    (lambda a: a["annotations"][1].update(bbox=[0, 0, 20]), r"annotations\[1\], field 'bbox'"),
    (lambda a: a["annotations"][0].update(image_id=5), r"annotations\[0\], field 'image_id'"),
    (lambda a: a["images"].append({"id": 7}), r"images\[2\], field 'id': 7 appears twice"),
    (lambda a: a.pop("categories"), r"field 'categories': must be a list"),
    (lambda a: a["annotations"][0].update(image_id=[7]), r"annotations\[0\], field 'image_id': must be a whole number"),
    (lambda a: a["annotations"][1].update(category_id={"id": 3}), r"annotations\[1\], field 'category_id': must be a whole"),
    (lambda a: a["images"][1].update(id=2**63), r"images\[1\], field 'id': must be a whole number from -2\*\*53"),
    (lambda a: a["annotations"][1].update(id=1), r"annotations\[1\], field 'id': 1 appears twice"),
    (lambda a: a["annotations"][1].update(id=0), r"annotations\[1\], field 'id': must be a whole number from 1 to 2\*\*53"),
    (lambda a: a["annotations"][0].update(area=10**400), r"annotations\[0\], field 'area': must be a finite number"),
    (lambda a: a["images"].append([8]), r"images\[2\]: must be an object"),
])
def test_bad_annotations_name_the_file_the_entry_and_the_field(tmp_path, change, says):
    data = json.loads(json.dumps(ANNOTATIONS))
    change(data)
    candidates, annotations = write_coco(tmp_path, data, [GOOD])
    with pytest.raises(ValueError, match=r"instances.json: .*" + says):
        coco_source(candidates, annotations)


def test_files_that_are_not_json_are_refused(tmp_path):
    candidates, annotations = write_coco(tmp_path, ANNOTATIONS, [GOOD])
    candidates.write_text("[{")
    with pytest.raises(ValueError, match="preds.json: the candidates are not valid JSON"):
        coco_source(candidates, annotations)


def test_image_ids_pick_images_and_their_order_does_not_change_the_metrics(tmp_path):
    candidates, annotations = write_coco(tmp_path, ANNOTATIONS, [
        GOOD, GOOD | {"bbox": [12, 10, 50, 50], "score": 0.5},
        {"image_id": 9, "category_id": 3, "bbox": [0, 0, 20, 40], "score": 0.8},
        {"image_id": 9, "category_id": 1, "bbox": [0, 0, 20, 40], "score": 0.7}])
    both, reversed_ = coco_source(candidates, annotations), coco_source(candidates, annotations, [9, 7])
    assert [im.image_id for im in both.images] == [7, 9] and [im.image_id for im in reversed_.images] == [9, 7]
    assert both.n == 4 and both.image == "preds.json" and json.loads(both.source_params)["annotations"] == "instances.json"
    assert coco_metrics(both.ground_truth, detect("torchvision", both, 0.5).rows) == \
        coco_metrics(reversed_.ground_truth, detect("torchvision", reversed_, 0.5).rows)
    only = coco_source(candidates, annotations, [9])
    assert only.n == 2 and [a["image_id"] for a in only.ground_truth["annotations"]] == [9]
    with pytest.raises(ValueError, match="instances.json: has no image with id 4"):
        coco_source(candidates, annotations, [4])


def test_annotations_are_read_clean(tmp_path):
    data = json.loads(json.dumps(ANNOTATIONS))
    data["annotations"][0] |= {"segmentation": [[1, 2, 3]], "iscrowd": 1}
    path = tmp_path / "a.json"
    path.write_text(json.dumps(data))
    clean = load_annotations(path)
    assert clean["annotations"][0] == {"id": 1, "image_id": 7, "category_id": 1, "bbox": [10.0, 10.0, 50.0, 50.0],
                                       "area": 2500.0, "iscrowd": 1}


def test_an_image_without_candidates_is_run_and_scored(evaluator):
    gt = ground_truth({1: [[0, 0, 10, 10]], 2: [[0, 0, 10, 10]]})
    empty = ImageCandidates(2, torch.empty((0, 4)), torch.empty(0), torch.empty(0, dtype=torch.int64))
    one = ImageCandidates(1, torch.tensor([[0.0, 0, 10, 10]]), torch.tensor([0.9]), torch.tensor([1]))
    source = AccuracySource("coco", [one, empty], gt, "{}")
    result = detect("torchvision", source, 0.5)
    assert len(result.times_ns) == 2 and result.kept == 1
    assert coco_metrics(gt, result.rows)["ar100"] == pytest.approx(0.5)


def test_older_results_files_read_the_accuracy_columns_blank(tmp_path):
    old = [c for c in COLUMNS if c not in ADDED_IN_SCHEMA_8]
    path = tmp_path / "old.csv"
    row = {c: "" for c in old} | {"schema_version": 7, "benchmark": "nms", "impl": "torchvision", "status": "ok",
                                  "median_us": 1.0, "scenario": "uniform", "n": 64}
    path.write_text(",".join(old) + "\n" + ",".join(str(row[c]) for c in old) + "\n")
    frame = read_results(path)
    assert frame["ap"].isna().all() and frame["ar100_crowded"].isna().all() and (frame["source_params"] == "").all()
