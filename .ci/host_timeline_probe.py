"""Where an eager call's time goes on the host, against its GPU time: each launch and the
one synchronization are stamped with perf_counter (the module's functions wrapped), over
200 calls, and the GPU time comes from the padded op's CUDA graph replays. Prints medians
(µs): pre (call start to the first launch), launches (first launch start to last launch
end), between (to the wait), spin (HostCount.wait reading the count until the kernel set
it), sync (its stream synchronization), post (after the wait to the return), total, and
the graph time.
Run on the device: python3 .ci/host_timeline_probe.py"""
import statistics
import time

from nmsbench import datasets
from nmsbench.variants import _cuda
from nmsbench.variants import hard_fused as hf
from nmsbench.variants import matrix_recompute as mr
from probe_timers import graph_us

STAMPS: list[tuple[str, int]] = []
real_launch, real_wait = _cuda._launch, _cuda.HostCount.wait


def stamped_launch(*args, **kwargs):
    STAMPS.append(("launch", time.perf_counter_ns()))
    real_launch(*args, **kwargs)
    STAMPS.append(("launched", time.perf_counter_ns()))


def stamped_wait(self, device):
    STAMPS.append(("wait", time.perf_counter_ns()))
    value = real_wait(self, device)
    STAMPS.append(("waited", time.perf_counter_ns()))
    return value


real_compiled = _cuda.CompiledLaunch.__call__


def stamped_compiled(self, stream, *values):
    STAMPS.append(("launch", time.perf_counter_ns()))
    real_compiled(self, stream, *values)
    STAMPS.append(("launched", time.perf_counter_ns()))


class StampedRuntime:
    """The runtime API with its stream synchronization stamped (HostCount.wait's last step)."""

    def __init__(self, runtime):
        self.runtime = runtime

    def streamSynchronize(self, stream):  # noqa: N802 (the runtime's name)
        STAMPS.append(("synchronize", time.perf_counter_ns()))
        self.runtime.streamSynchronize(stream)


_cuda._launch = stamped_launch
_cuda.CompiledLaunch.__call__ = stamped_compiled
_cuda.HostCount.wait = stamped_wait
_cuda._runtime = StampedRuntime(_cuda._runtime_api())


def main():
    cases = [("hard_fused", n) for n in (64, 512, 1024, 2048, 4096, 8192)] + \
            [("matrix_recompute", n) for n in (64, 1024, 4096, 8192)]
    for name, n in cases:
        bs = datasets.generate("clustered", n, seed=0).to("cuda")
        if name == "hard_fused":
            def op(padded=False):
                return hf.hard_fused_cuda(bs.boxes, bs.scores, iou_threshold=0.5, padded=padded)
        else:
            def op(padded=False):
                return mr.matrix_recompute_cuda(bs.boxes, bs.scores, iou_threshold=0.5, kernel="gaussian", sigma=0.5,
                                                score_threshold=0.05, padded=padded)
        for _ in range(20):
            op()
        parts = {k: [] for k in ("pre", "launches", "between", "spin", "sync", "post", "total")}
        launches = 0
        for _ in range(200):
            STAMPS.clear()
            t0 = time.perf_counter_ns()
            op()
            t1 = time.perf_counter_ns()
            first = next(t for k, t in STAMPS if k == "launch")
            last = [t for k, t in STAMPS if k == "launched"][-1]
            wait = next(t for k, t in STAMPS if k == "wait")
            synchronize = next(t for k, t in STAMPS if k == "synchronize")
            waited = next(t for k, t in STAMPS if k == "waited")
            launches = sum(1 for k, _ in STAMPS if k == "launch")
            for key, value in (("pre", first - t0), ("launches", last - first), ("between", wait - last),
                               ("spin", synchronize - wait), ("sync", waited - synchronize),
                               ("post", t1 - waited), ("total", t1 - t0)):
                parts[key].append(value / 1e3)
        graph = graph_us(lambda: op(padded=True))
        print(f"{name:16s} n={n:5d} launches={launches} "
              + " ".join(f"{k}={statistics.median(v):6.1f}" for k, v in parts.items())
              + f"  graph={graph:6.1f}", flush=True)


if __name__ == "__main__":
    main()
