"""Bad COCO files given to `nmsbench accuracy`: every wrong field, wrong entry and JSON nested
too deep gets exit 2 with the file, the entry and the field named, never a traceback."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nmsbench.accuracy import MAX_JSON_DEPTH, _json_depth
from nmsbench.cli import main

FLOAT32_MAX = float(np.finfo(np.float32).max)
ANNOTATIONS = {
    "info": {"description": "three images"},
    "images": [{"id": 1, "width": 200, "height": 100, "file_name": "a.jpg"}, {"id": 2, "width": 50, "height": 50},
               {"id": 3}],
    "categories": [{"id": 1, "name": "cat", "supercategory": "animal"}, {"id": 4, "name": "dog"}],
    "annotations": [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 50, 40], "area": 2000.0, "iscrowd": 0,
         "segmentation": [[10, 10, 60, 10, 60, 50]]},
        {"id": 2, "image_id": 1, "category_id": 4, "bbox": [70.5, 5, 20, 20], "iscrowd": 1},
        {"id": 3, "image_id": 2, "category_id": 4, "bbox": [0, 0, 10, 30]},
    ],
}
CANDIDATES = [
    {"image_id": 1, "category_id": 1, "bbox": [11, 10, 50, 40], "score": 0.9},
    {"image_id": 1, "category_id": 1, "bbox": [14, 12, 50, 40], "score": 0.5},
    {"image_id": 1, "category_id": 4, "bbox": [70, 5, 20, 21], "score": 0.8},
    {"image_id": 2, "category_id": 4, "bbox": [0, 1, 10, 30], "score": 0.7},
    {"image_id": 3, "category_id": 1, "bbox": [5, 5, 5, 5], "score": 0.1},
]
FILES = {"instances.json": ANNOTATIONS, "preds.json": CANDIDATES}


def leaf_paths(value, path=()):
    """Every place in ``value`` a mutation can go: each container entry and each field."""
    found = [path] if path else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += leaf_paths(inner, path + (key,))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found += leaf_paths(inner, path + (i,))
    return found


PLACES = [(name, path) for name, data in FILES.items() for path in leaf_paths(data)]
WRONG = [[1], [], {"id": 1}, {}, "7", "", True, False, 0.5, 1.0, -2.5, 1e39, float("nan"), float("inf"), 2**53,
         2**53 + 1, 2**63, -(2**63) - 1, 10**400, -1, 0, 7, None]
DELETE = object()


def is_id(v) -> bool:
    return type(v) is int and abs(v) <= 2**53


def is_number(v) -> bool:
    if type(v) not in (int, float):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def is_bbox(v) -> bool:
    if type(v) is not list or len(v) != 4 or not all(is_number(x) for x in v) or v[2] < 0 or v[3] < 0:
        return False
    x, y, w, h = map(float, v)
    return max(abs(x), abs(y), abs(x + w), abs(y + h)) <= FLOAT32_MAX


# what each field read from a COCO file must be (the formats' definitions; any other field is not read)
RULES = {"id": is_id, "image_id": is_id, "category_id": is_id, "bbox": is_bbox,
         "score": lambda v: is_number(v) and abs(v) <= FLOAT32_MAX,
         "area": lambda v: is_number(v) and v >= 0,
         "iscrowd": lambda v: type(v) in (int, float) and v in (0, 1)}
LISTS = ("images", "annotations", "categories")


def location(name: str, path: tuple, too_deep: bool = False) -> tuple[str, str]:
    """The entry and the field a message must name for a mutation at ``path`` of file ``name``
    (the field: the one read, e.g. 'bbox' for one of its numbers)."""
    if name == "preds.json":
        return f"entry {path[0]}", (f"field '{path[1]}'" if len(path) > 1 else "")
    if len(path) == 1:  # a top-level field; nested too deep, its first entry
        return (f"{path[0]}[0]", "") if too_deep else ("", f"field '{path[0]}'")
    if path[0] not in LISTS:
        return "", f"field '{path[0]}'"
    return f"{path[0]}[{path[1]}]", (f"field '{path[2]}'" if len(path) > 2 else "")


def verdict(name: str, path: tuple, value) -> str:
    """'bad': the file breaks a rule at ``path``; 'good': the value is of its field's kind;
    'read': an id or an entry of its kind, though the file may now break a cross-reference
    (an id that names nothing), which is refused naming where; 'ignored': not read."""
    if name == "instances.json" and path[0] not in LISTS:
        return "ignored"
    entry_depth = 1 if name == "preds.json" else 2
    if value is DELETE:
        if len(path) == 1:
            return "bad" if name == "instances.json" else "read"  # a whole list, or a candidate
        if len(path) == entry_depth:
            return "read"  # an entry left out: only cross-references can break
        field = path[entry_depth]
        if len(path) > entry_depth + 1:  # a number of a bbox (or of an unread segmentation)
            return "bad" if field == "bbox" else "ignored"
        if name == "instances.json" and path[0] != "annotations":
            return "bad" if field == "id" else "ignored"
        if name == "instances.json" and field in ("id", "area", "iscrowd"):  # optional
            return "ignored"
        return "bad" if field in RULES else "ignored"
    data = json.loads(json.dumps(FILES[name]))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    if len(path) == 1:  # images, annotations or categories
        return "read" if type(value) is list else "bad"
    if len(path) == entry_depth:
        return "read" if type(value) is dict else "bad"
    field = path[entry_depth]
    if (name == "instances.json" and path[0] != "annotations" and field != "id") or field not in RULES:
        return "ignored"
    entry = data[path[0]] if name == "preds.json" else data[path[0]][path[1]]
    if path[0] == "annotations" and field == "id" and is_id(entry[field]) and entry[field] < 1:
        return "bad"  # the evaluators take an object id of 0 (faster-coco-eval: <= 0) for "unmatched"
    if not RULES[field](entry[field]):
        return "bad"
    return "read" if field in ("id", "image_id", "category_id") else "good"


def write_files(tmp_path, name: str, path: tuple, value):
    files = {}
    for file_name, data in FILES.items():
        data = json.loads(json.dumps(data))
        if file_name == name:
            target = data
            for key in path[:-1]:
                target = target[key]
            if value is DELETE:
                del target[path[-1]]
            else:
                target[path[-1]] = value
        files[file_name] = tmp_path / file_name
        files[file_name].write_text(json.dumps(data))
    return files["preds.json"], files["instances.json"]


def run_accuracy(tmp_path, candidates, annotations):
    out = tmp_path / "acc.csv"
    result = CliRunner().invoke(main, ["accuracy", "--candidates", str(candidates), "--annotations", str(annotations),
                                       "--impl", "torchvision", "--threads", "1", "--out", str(out), "--force"])
    return result, " ".join(result.output.split())


def nested(depth: int):
    value = 5
    for _ in range(depth):
        value = [value]
    return value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(place=st.sampled_from(PLACES), value=st.sampled_from(WRONG + [DELETE]) | st.integers(1, 200).map(nested))
def test_every_mutation_of_a_valid_file_is_read_or_refused_naming_file_entry_and_field(tmp_path, monkeypatch, place,
                                                                                       value):
    # the sidecar's library versions (a scan of every installed package) are not what is tested
    monkeypatch.setattr("nmsbench.progress.library_versions", lambda modules: {})
    name, path = place
    candidates, annotations = write_files(tmp_path, name, path, value)
    result, text = run_accuracy(tmp_path, candidates, annotations)
    assert result.exit_code in (0, 2) and "Traceback" not in result.output, (result.output, result.exception)
    too_deep = _json_depth((tmp_path / name).read_text()) > MAX_JSON_DEPTH
    kind = "bad" if too_deep else verdict(name, path, value)
    if kind == "bad":
        assert result.exit_code == 2, text
        entry, field = location(name, path, too_deep)
        assert f"{name}: {entry}" in text and field in text, (path, text)
        if too_deep:
            assert f"nested deeper than {MAX_JSON_DEPTH} levels (line 1, column" in text, text
    elif kind in ("good", "ignored"):
        assert result.exit_code == 0, text
    elif result.exit_code == 2:  # of its kind, yet naming something that is not there
        assert re.search(r"(instances|preds)\.json: (entry \d+|\w+\[\d+\]|field '\w+')", text), text


DEEP = "[" * 200_000 + "5" + "]" * 200_000  # too deep for json.dumps to write


@pytest.mark.parametrize("name, path, value, says", [
    ("instances.json", ("annotations", 0, "image_id"), "[1]", "instances.json: annotations[0], field 'image_id': "
                                                                "must be a whole number from -2**53 to 2**53, got [1]"),
    ("instances.json", ("annotations", 2, "category_id"), '{"id": 4}', "instances.json: annotations[2], field "
                                                                       "'category_id': must be a whole number"),
    ("instances.json", ("images", 1, "id"), str(2**63), "instances.json: images[1], field 'id': must be a whole number"),
    ("preds.json", (3, "image_id"), str(2**63), "preds.json: entry 3, field 'image_id': must be a whole number"),
    ("preds.json", (1, "bbox"), DEEP, "preds.json: entry 1, field 'bbox': nested deeper than 64 levels"),
    ("instances.json", ("annotations", 1, "segmentation"), DEEP,
     "instances.json: annotations[1], field 'segmentation': nested deeper than 64 levels"),
])
def test_the_files_that_raised_are_refused(tmp_path, name, path, value, says):
    candidates, annotations = write_files(tmp_path, name, path, "@@VALUE@@")
    target = tmp_path / name
    target.write_text(target.read_text().replace('"@@VALUE@@"', value))
    result, output = run_accuracy(tmp_path, candidates, annotations)
    assert result.exit_code == 2 and says in output, output


def test_a_whole_file_nested_too_deep_is_refused(tmp_path):
    candidates, annotations = write_files(tmp_path, "preds.json", (0, "score"), 0.5)
    for target in (candidates, annotations):
        good = target.read_text()
        target.write_text("[" * 200_000 + "]" * 200_000)
        result, output = run_accuracy(tmp_path, candidates, annotations)
        assert result.exit_code == 2 and f"{target.name}: entry 0: nested deeper than 64 levels" in output, output
        target.write_text(good)


def test_brackets_inside_strings_are_text(tmp_path):
    deep = '[{"\\"' + "[" * 100 + '": 1}]'
    assert _json_depth(deep) == 2
    candidates, annotations = write_files(tmp_path, "instances.json", ("images", 0, "file_name"), "[" * 500 + '\\"{')
    result, output = run_accuracy(tmp_path, candidates, annotations)
    assert result.exit_code == 0, output


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(alphabet='[]{}"\\ab\n\u00e9\U0001f600'),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(alphabet='[]{}"\\a'), inner, max_size=4),
    max_leaves=30)


def depth_of(value) -> int:
    if isinstance(value, (list, dict)):
        return 1 + max((depth_of(v) for v in (value.values() if isinstance(value, dict) else value)), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.booleans(), st.booleans())
def test_json_depth_is_the_nesting_of_the_value(value, ascii_only, indent):
    assert _json_depth(json.dumps(value, ensure_ascii=ascii_only, indent=1 if indent else None)) == depth_of(value)
