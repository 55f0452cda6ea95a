"""The host side of the CUDA input check (nmsbench/cuda/validate.py) without a GPU:
the launch it packs for eager and padded calls (grid, arguments in the kernel's layout,
scratch only with several blocks, the thread's verdict memory), and how the verdict is read
after the op. The driver, the stream and the pinned memory are stubbed."""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest
import torch

from nmsbench.cuda import launch
from nmsbench.cuda import validate as _validate


class FakeHost:
    def __init__(self):
        self.value = np.full(1, -1, dtype=np.int64)
        self.address = 0x5000
        self.waits = 0

    def wait(self, device):
        self.waits += 1
        value, self.value[0] = int(self.value[0]), -1
        return value


class FakeWords:
    def __init__(self, address):
        self.address = address

    def data_ptr(self):
        return self.address


@pytest.fixture
def launches(monkeypatch):
    """Each launch as (grid, block, stream, the argument values unpacked from the
    kernelParams the driver would read)."""
    recorded = []

    class RecordingDriver:
        @staticmethod
        def launchKernel(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):  # noqa: N802 - cupy's name
            pointers = (ctypes.c_void_p * len(_validate._CODES)).from_address(params)
            values = tuple(struct.unpack_from("@" + code, ctypes.string_at(pointer, 8))[0]
                           for code, pointer in zip(_validate._CODES, pointers))
            recorded.append(((gx, gy, gz), (bx, by, bz), stream, values))

    class Kernel:
        ptr = 0x1234

    monkeypatch.setattr(launch, "_driver", RecordingDriver)
    monkeypatch.setattr(_validate.MODULE, "get", lambda name, dtype, device: Kernel)
    hosts = {}
    monkeypatch.setattr(_validate, "host_count", lambda device, slot: hosts.setdefault((device, slot), FakeHost()))
    monkeypatch.setattr(_validate, "_zeroed_per_stream", lambda store, index, stream, count: FakeWords(0x9000 + stream))
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: -1)  # CPU tensors stand in: their device index
    monkeypatch.setattr(_validate, "_local", type(_validate._local)())
    return recorded


def inputs(n, dtype=torch.float32):
    boxes = torch.rand(n, 4, dtype=dtype)
    return boxes, torch.rand(n, dtype=dtype)


@pytest.mark.parametrize("n", [1, 256, 257, 5000])
def test_eager_launch_packs_the_kernels_layout(launches, n):
    boxes, scores = inputs(n)
    host = _validate.launch_check(boxes, scores)
    (grid, block, stream, values), = launches
    assert grid == (-(-n // _validate.THREADS), 1, 1) and block == (_validate.THREADS, 1, 1) and stream == 7
    scratch = 0x9000 + 7 if n > _validate.THREADS else 0  # shared scratch only where blocks must combine
    assert values == (boxes.data_ptr(), scores.data_ptr(), n, scratch, host.address, 0)
    assert _validate.launch_check(boxes, scores) is host  # the thread's verdict memory is reused
    assert len(launches) == 2 and launches[1][3] == values


def test_padded_launch_writes_to_its_own_device_words(launches):
    boxes, scores = inputs(1000, torch.float64)
    verdict = _validate.launch_check(boxes, scores, padded=True)
    (grid, _, _, values), = launches
    assert grid == (4, 1, 1) and verdict.shape == () and verdict.dtype == torch.int64
    scratch, host, device = values[3:]
    assert host == 0 and device == scratch + 8 == verdict.data_ptr()  # the verdict follows the two scratch words
    assert int(verdict) == 0  # zeroed, as the kernel's scratch must be


def test_unsupported_inputs_are_left_to_the_caller(launches):
    boxes, scores = inputs(10)
    assert _validate.launch_check(boxes.t().contiguous().t(), scores) is None  # not contiguous
    assert _validate.launch_check(boxes.bfloat16(), scores.bfloat16()) is None
    assert launches == []


def test_the_verdict_is_read_without_waiting_once_written(launches):
    boxes, scores = inputs(10)
    host = _validate.launch_check(boxes, scores)
    host.value[0] = 0  # what the kernel writes for good input, seen after the op's own synchronization
    assert _validate.host_verdict(host, boxes) == 0 and host.waits == 0 and host.value[0] == -1
    _validate.launch_check(boxes, scores)
    host.value[0] = -1  # not written yet: the op did not synchronize, so the check waits
    assert _validate.host_verdict(host, boxes) == -1 and host.waits == 1


def test_each_stream_gets_its_own_scratch(launches, monkeypatch):
    boxes, scores = inputs(1000)
    _validate.launch_check(boxes, scores)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 8)
    _validate.launch_check(boxes, scores)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7)
    _validate.launch_check(boxes, scores)
    assert [(stream, values[3]) for _, _, stream, values in launches] == [(7, 0x9007), (8, 0x9008), (7, 0x9007)]
