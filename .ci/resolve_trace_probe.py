"""Where hard_fused's block resolve spends its rounds: a copy of hard_fused.cu with clock64()
stamps in block_resolve_kernel (thread 0, the deciding warp's lane 0), compiled here and
run on the real mask of the sweep's scenes. Prints, per N and scene, the mean cycles of
each part of a round: the decider's words, its round's end (the kept boxes written out,
their rows ORed into the next round's words), the wait at the round's barrier (the decider is thread 0: the time until
the other warps, which stage the next round and OR the last, arrived) and when those
warps were done, counted from the round's start.
Run on the device: python3 .ci/resolve_trace_probe.py"""
import numpy as np
import torch

from nmsbench import datasets
from nmsbench.variants import hard_fused as hf
from nmsbench.variants._cuda import HERE, CudaModule, on_torch_stream, rank_by_score

SLOTS = 16  # per round: 0 start, 1..8 after word g, 9 after the prefetch, 10 after barrier 1, 11 after barrier 2, 12 kept


def traced_source(text: str) -> str:
    def swap(old, new):
        nonlocal text
        assert text.count(old) == 1, old
        text = text.replace(old, new)

    swap("extern \"C\" __global__ void __launch_bounds__(RESOLVE_THREADS, 1) block_resolve_kernel(",
         "__device__ long long resolve_trace[128 * 16 + 4];\n"
         "extern \"C\" __global__ void copy_trace(long long* out) { for (int i = threadIdx.x; i < 128 * 16 + 4; i += blockDim.x) out[i] = resolve_trace[i]; }\n"
         "#define STAMP(k) if (tid == 0) resolve_trace[(first / ROUND_WORDS) * 16 + (k)] = clock64()\n"
         "extern \"C\" __global__ void __launch_bounds__(RESOLVE_THREADS, 1) block_resolve_kernel(")
    swap("    for (int round = 0, first = 0; first < words; ++round, first += ROUND_WORDS) {\n",
         "    if (tid == 0) { unsigned long long g; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(g)); resolve_trace[128 * 16] = g; resolve_trace[128 * 16 + 1] = clock64(); }\n"
         "    for (int round = 0, first = 0; first < words; ++round, first += ROUND_WORDS) {\n        STAMP(0);\n")
    swap("carry[h] |= warp_or(mine ? own[g][h] : 0u);\n                    }\n                }\n",
         "carry[h] |= warp_or(mine ? own[g][h] : 0u);\n                    }\n                }\n                STAMP(1 + g);\n")
    swap("            if (lane == 0) kept_in_round[parity] = in_round;\n",
         "            if (lane == 0) kept_in_round[parity] = in_round;\n            STAMP(9);\n"
         "            if (tid == 0) resolve_trace[(first / ROUND_WORDS) * 16 + 12] = in_round;\n")
    swap("                                         first + ROUND_WORDS, removed, helper);\n",
         "                                         first + ROUND_WORDS, removed, helper);\n"
         "            if (tid == 32) resolve_trace[(first / ROUND_WORDS) * 16 + 11] = clock64();\n")
    swap("        __syncthreads();  // round decided, round + 1 staged, the bitmap past it up to date with round - 1\n    }\n",
         "        __syncthreads();  // round decided, round + 1 staged, the bitmap past it up to date with round - 1\n        STAMP(10);\n    }\n"
         "    if (tid == 0) { unsigned long long g; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(g)); resolve_trace[128 * 16 + 2] = g; resolve_trace[128 * 16 + 3] = clock64(); }\n")
    return text


class TracedModule(CudaModule):
    def source(self) -> str:
        return (HERE / "_common.cuh").read_text() + traced_source((HERE / self.cu_file).read_text())


def main():
    dev = torch.device("cuda")
    module = TracedModule("hard_fused.cu", plain=("block_resolve_kernel", "copy_trace"))
    for scenario in ("clustered", "uniform"):
        for n in (2048, 4096, 8192, 32768):
            data = datasets.generate(scenario, n, seed=0).to("cuda")
            b, s = data.boxes, data.scores
            words = (n + 31) // 32
            out = torch.empty(n + 1, dtype=torch.int64, device=dev)
            mask = torch.empty((n, words), dtype=torch.int32, device=dev)
            trace = torch.zeros(128 * 16 + 4, dtype=torch.int64, device=dev)
            with on_torch_stream(dev) as launch:
                order, ranked = rank_by_score(launch, b, s, None)
                hf.launch_tile_mask(launch, b.dtype, dev, ranked.sorted_boxes, None, n, np.float64(0.5), mask)
                hf.opted_in_shared_limit(module.get("block_resolve_kernel", None, dev), dev)
                for _ in range(5):  # the last of 5 back-to-back runs (warm L2, as in the op)
                    launch(module.get("block_resolve_kernel", None, dev), (1,), (hf.RESOLVE_THREADS,),
                           (mask, order, n, words, out, np.uint64(out.data_ptr() + 8 * n), None),
                           shared_mem=hf.block_resolve_shared_bytes(words))
                launch(module.get("copy_trace", None, dev), (1,), (256,), (trace,))
            t = trace.cpu().numpy()
            ns, cycles = t[128 * 16 + 2] - t[128 * 16], t[128 * 16 + 3] - t[128 * 16 + 1]
            ghz = cycles / ns
            rounds = -(-words // 8)
            r = t[: rounds * 16].reshape(rounds, 16)
            steps = np.diff(r[:, :11], axis=1)  # 10 intervals: 8 words, next-round carry, barrier
            helpers_done = r[:, 11] - r[:, 0]  # from the round's start (same SM clock)
            names = [f"w{g}" for g in range(8)] + ["round_end", "barrier"]
            mean = steps.mean(axis=0)
            kept = r[:, 12]
            print(f"{scenario} {n}: resolve {ns / 1e3:.1f} us ({ghz:.2f} GHz), {rounds} rounds, "
                  f"{cycles / rounds:.0f} cycles/round, kept/round {kept.mean():.1f}, helpers done at "
                  f"{helpers_done.mean():.0f}; mean cycles: " + " ".join(f"{k}={v:.0f}" for k, v in zip(names, mean)), flush=True)
            for q in (0, rounds // 2, rounds - 1):
                print(f"   round {q}: kept {kept[q]} helpers {helpers_done[q]} "
                      + " ".join(f"{k}={v}" for k, v in zip(names, steps[q])), flush=True)


if __name__ == "__main__":
    main()
