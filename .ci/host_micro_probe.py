"""Host costs of the pieces an eager call is made of, on the device's CPU: torch.empty on
CUDA at the sizes our ops allocate (and freeing it), entering on_torch_stream, host_count,
a tensor slice, np.float64 and Address. Median of 20 rounds of 2,000 calls (µs per call).
Run on the device: python3 .ci/host_micro_probe.py"""
import statistics
import time

import numpy as np
import torch

from nmsbench.variants import _cuda

DEV = torch.device("cuda")


def per_call_us(fn, reps=2000, rounds=20):
    fn()
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        out.append(1e6 * (time.perf_counter() - start) / reps)
    return statistics.median(out)


def main():
    t = torch.empty(100000, dtype=torch.int64, device=DEV)
    for words in (65, 513 + 8 * 1024, 4097 + 1024 * 128 // 2 * 4 + 20000, 8193 + 8192 * 256 // 2 + 40000):
        print(f"torch.empty({words} int64 = {8 * words / 1e6:.2f} MB) {per_call_us(lambda: torch.empty(words, dtype=torch.int64, device=DEV)):.2f}")

    def enter():
        with _cuda.on_torch_stream(DEV):
            pass
    for name, fn in (("on_torch_stream enter/exit", enter), ("host_count", lambda: _cuda.host_count(DEV)),
                     ("slice t[:7]", lambda: t[:7]), ("view+slice", lambda: t.view(torch.float32)[8:15]),
                     ("np.float64", lambda: np.float64(0.5)), ("Address", lambda: _cuda.Address(123456789)),
                     ("np.uint64", lambda: np.uint64(123456789)),
                     ("current_device", torch.cuda.current_device),
                     ("pack 10 args", lambda: _cuda.pack_arguments((t, t, None, 5, 7, np.float64(0.5), _cuda.Address(9),
                                                                    _cuda.Address(10), _cuda.Address(11), None)))):
        print(f"{name} {per_call_us(fn):.2f}")


if __name__ == "__main__":
    main()
