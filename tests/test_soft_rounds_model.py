"""The design of soft_rounds (implementations/soft_rounds.cu) held to the Soft-NMS
definition on the CPU: a plain-Python model of its rounds, step for step as the kernels
take them (the decay graph; per round, new entries sorted in and scores recomputed from
the input score, then the picks no undecided neighbour outranks and their factors sent
out), must give the definition's picks and final scores bit for bit. The kernels are
checked against soft_nms on the GPU (tests/test_gpu.py); this checks, in CI, that the
parallel rounds are Soft-NMS at all, ties, duplicates and dropped boxes included.
"""

from __future__ import annotations

import math

import definitions as D
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import DTYPE_IDS, SIGMAS, SOFT_SCORE_THRESHOLDS, THRESHOLDS, cases, examples

CPU_DTYPES = [torch.float32, torch.float64]


def outranks(current, a: int, b: int) -> bool:
    return current[a] > current[b] or (current[a] == current[b] and a < b)


def rounds_model(boxes, scores, labels, iou_threshold: float, kernel: str, sigma: float, score_threshold: float):
    """(picks, final scores, rounds) as soft_rounds computes them."""
    rows, s, lab = D._inputs(boxes, scores, labels)
    n, linear = len(rows), kernel == "linear"

    def factor(v: float) -> float:
        if linear:
            return 1.0 - v if v >= iou_threshold else 1.0
        return math.exp(-(v * v) / sigma)

    current = [float(s[k]) for k in range(n)]
    undecided, dropped = set(), set()
    for k in range(n):
        (undecided if current[k] >= score_threshold else dropped).add(k)
    neighbours = {i: [j for j in undecided if j != i and lab[j] == lab[i] and float(D.iou(rows[i], rows[j])) > 0
                      and (not linear or float(D.iou(rows[i], rows[j])) >= iou_threshold)] for i in undecided}
    entries = {i: [] for i in range(n)}  # (pick, factor): its picked neighbours, sorted up to sorted_length
    sorted_length = {i: 0 for i in range(n)}
    picked: dict[int, int] = {}
    round_ = 0
    while True:
        for i in sorted(undecided):  # 1. entries sorted in (insertion), score recomputed or carried on
            listed, before = entries[i], sorted_length[i]
            if len(listed) == before:
                continue
            lowest = len(listed)
            for k in range(before, len(listed)):
                place = k
                while place > 0 and outranks(current, listed[k][0], listed[place - 1][0]):
                    place -= 1
                listed.insert(place, listed.pop(k))
                lowest = min(lowest, place)
            start = before if lowest >= before else 0
            score = current[i] if start > 0 else float(s[i])
            for _, f in listed[start:]:
                score *= f
            current[i], sorted_length[i] = score, len(listed)
            if score < score_threshold:
                undecided.discard(i)
                dropped.add(i)
        if not undecided:
            break
        chosen = [i for i in sorted(undecided)  # 2. no undecided neighbour outranks it
                  if not any(u in undecided and outranks(current, u, i) for u in neighbours[i])]
        assert chosen, "a round must pick"
        for p in chosen:
            assert not any(q in neighbours[p] for q in chosen), "two neighbours picked in one round"
        for p in chosen:  # 3. its factors to its undecided neighbours
            picked[p] = round_
            undecided.discard(p)
        for p in chosen:
            for u in neighbours[p]:
                if u in undecided:
                    entries[u].append((p, factor(float(D.iou(rows[p], rows[u])))))
        round_ += 1
    order = sorted(picked, key=lambda i: (-current[i], i))
    return order, [current[i] for i in order], round_


@pytest.mark.parametrize("kernel", ["gaussian", "linear"])
@pytest.mark.parametrize("dtype", CPU_DTYPES, ids=DTYPE_IDS[:2])
@settings(max_examples=examples(60))
@given(data=st.data())
def test_the_rounds_are_soft_nms(kernel, dtype, data):
    case = data.draw(cases(dtype), label="case")
    thr = data.draw(THRESHOLDS, label="iou_threshold")
    sigma = data.draw(SIGMAS, label="sigma")
    score_threshold = data.draw(SOFT_SCORE_THRESHOLDS, label="score_threshold")
    keep, final = D.soft_nms(case.boxes, case.scores, thr, case.labels, kernel=kernel, sigma=sigma,
                             score_threshold=score_threshold)
    got, got_final, _ = rounds_model(case.boxes, case.scores, case.labels, thr, kernel, sigma, score_threshold)
    assert got == keep
    assert got_final == final  # bit for bit: every product the definition's, factor for factor


def test_a_clique_takes_a_round_a_pick_and_far_boxes_share_one():
    import numpy as np

    same = [[0.0, 0.0, 10.0, 10.0]] * 5  # one clique: a pick a round
    far = [[100.0 * k, 0.0, 100.0 * k + 10, 10.0] for k in range(1, 6)]  # alone: all in the first round
    scores = [0.9, 0.8, 0.7, 0.6, 0.5] + [0.4] * 5
    keep, final, rounds = rounds_model(np.array(same + far, dtype=np.float32), np.array(scores, dtype=np.float32),
                                       None, 0.3, "gaussian", 0.5, 0.0)
    assert rounds == 5 and sorted(keep) == list(range(10))  # the far boxes did not wait for the clique
    assert (keep, final) == D.soft_nms(np.array(same + far, dtype=np.float32), np.array(scores, dtype=np.float32),
                                       0.3, None, kernel="gaussian", sigma=0.5, score_threshold=0.0)
