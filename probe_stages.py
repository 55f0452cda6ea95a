import time, torch, numpy as np, nmsbench
from nmsbench import datasets
from nmsbench.variants import hard_fused as hf
from nmsbench.variants._cuda import on_torch_stream, rank_by_score, blocks
def ev(fn, reps=20):
    fn(); torch.cuda.synchronize()
    s=torch.cuda.Event(enable_timing=True); e=torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps): fn()
    e.record(); torch.cuda.synchronize(); return s.elapsed_time(e)*1e3/reps
for sc in ["clustered","uniform"]:
  for n in [1024,8192,32768]:
    d=datasets.generate(sc,n,seed=0).to("cuda"); b,s=d.boxes,d.scores
    words=(n+31)//32
    mask=torch.empty((n,words),dtype=torch.int32,device="cuda"); out=torch.empty(n+1,dtype=torch.int64,device="cuda")
    dev=b.device
    def rank():
        with on_torch_stream(dev) as launch:
            if n <= hf.COUNTING_RANK_MAX:
                return rank_by_score(launch,b,s,None)
            o=torch.sort(s+0.0,descending=True,stable=True).indices
            return o, b.index_select(0,o)
    order, ranked = rank()
    sb = ranked.sorted_boxes if n <= hf.COUNTING_RANK_MAX else ranked
    def m():
        with on_torch_stream(dev) as launch:
            launch(hf.CUDA_MODULE.get("mask_kernel", b.dtype, dev),(blocks(n,128),blocks(n,1024)),(128,),(sb,None,n,words,np.float64(0.5),mask))
    def r():
        with on_torch_stream(dev) as launch:
            args=(mask,order,n,words,out[:n],out[n],None)
            if words<=32: launch(hf.CUDA_MODULE.get("warp_resolve_kernel",None,dev),(1,),(32,),args)
            else: launch(hf.CUDA_MODULE.get("block_resolve_kernel",None,dev),(1,),(1024,),args,shared_mem=words*4)
    full=lambda: hf.hard_fused_cuda(b,s,iou_threshold=0.5,padded=True)
    print(f"{sc} n={n} rank {ev(lambda: rank()):.1f} mask {ev(m):.1f} resolve {ev(r):.1f} full(padded,events) {ev(full):.1f} kept {int(out[n])}", flush=True)
# host overhead at n=64
d=datasets.generate("clustered",64,seed=0).to("cuda"); b,s=d.boxes,d.scores
fn=lambda: hf.hard_fused_cuda(b,s,iou_threshold=0.5)
for _ in range(100): fn()
torch.cuda.synchronize()
def wall(f, k=2000):
    t=time.perf_counter()
    for _ in range(k): f()
    torch.cuda.synchronize(); return (time.perf_counter()-t)/k*1e6
print("wall eager", wall(fn), "padded(no sync)", wall(lambda: hf.hard_fused_cuda(b,s,iou_threshold=0.5,padded=True)))
print("empty", wall(lambda: torch.empty(65,dtype=torch.int64,device="cuda")), "sync", wall(lambda: torch.cuda.current_stream().synchronize()))
hc=hf._host_count(); print("host read", wall(lambda: int(hc.host[0])))
