"""Fake implementations for the subprocess tests of test_reliability.py.

A sweep in a child process cannot see implementations a test registers in its own
process, so the child imports this module before running the CLI (see
``test_reliability.cli_command``). Never import it in the test process: it would add
its implementations to the registry every other test iterates over.
``NMSBENCH_TEST_CALL_LOG`` names a file where each call appends the box count it got.
"""

from __future__ import annotations

import os
import time

import torch

from nmsbench import NMSResult, register


@register(name="test_slow", family="hard", devices=("cpu",), summary="sleeps 50 ms per call, keeps every box")
def slow(boxes, scores, *, iou_threshold, labels=None):
    log = os.environ.get("NMSBENCH_TEST_CALL_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{boxes.shape[0]}\n")
    time.sleep(0.05)
    return NMSResult(torch.arange(boxes.shape[0]))
