"""Test implementations that keep every box, for tests of the sweep's machinery."""

from __future__ import annotations

from contextlib import contextmanager

import torch

from nmsbench import NMSResult, register
from nmsbench.registry import unregister


@contextmanager
def keep_every_box(names):
    """Register CPU implementations ``names`` (family hard) that keep every box; yields
    the list each call appends its implementation's name to. Unregistered on exit."""
    calls = []
    for name in names:
        def fn(boxes, scores, *, iou_threshold, labels=None, name=name):
            calls.append(name)
            return NMSResult(torch.arange(boxes.shape[0]))

        register(name=name, family="hard", devices=("cpu",), summary="keeps every box")(fn)
    try:
        yield calls
    finally:
        for name in names:
            unregister(name)


def run_and_name(fn, calls) -> str:
    """Call ``fn`` (a timed call of one of these implementations); the name of the one that
    ran, from ``calls``, the list :func:`keep_every_box` yields."""
    before = len(calls)
    fn()
    return calls[before]
