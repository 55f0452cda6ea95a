"""Quick device probe: compile every CUDA backend, compare with the CPU backend."""
import sys, time, torch, nmsbench
from nmsbench import datasets
names = [n for n, i in nmsbench.implementations().items() if "cuda" in i.backends]
bad = 0
for name in names:
    t0 = time.time()
    for scen in datasets.SYNTHETIC:
        for n in [1, 2, 31, 33, 64, 65, 256, 1000, 4097]:
            for classes in (1, 3):
                for dtype in (torch.float32, torch.float16, torch.float64):
                    bs = datasets.generate(scen, n, seed=n, classes=classes)
                    cpu_in = bs.to("cpu", dtype).to("cpu", torch.float32) if dtype == torch.float16 else bs.to("cpu", dtype)
                    cpu = nmsbench.run_nms(name, cpu_in.boxes, cpu_in.scores, 0.5, labels=cpu_in.labels)
                    g = bs.to("cuda", dtype)
                    try:
                        gpu = nmsbench.run_nms(name, g.boxes, g.scores, 0.5, labels=g.labels)
                    except Exception as e:
                        print("ERROR", name, scen, n, classes, dtype, repr(e)[:300]); bad += 1; break
                    same = torch.equal(gpu.keep.cpu(), cpu.keep)
                    if not same:
                        bad += 1
                        if bad < 30:
                            print("DIFF", name, scen, n, classes, dtype, len(cpu.keep), len(gpu.keep))
    print(name, "done", round(time.time() - t0, 1), "s", flush=True)
print("bad", bad)
