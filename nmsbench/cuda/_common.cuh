// Shared by every nmsbench kernel (the bridge prepends it to each .cu file): loading an
// input element in its arithmetic type, and the IoU with torchvision's arithmetic.
//
// Inputs are templates over the stored type: float, double, or float16 carried as its raw
// bits (unsigned short). float16 is computed in float32, float64 in double.

template <typename T> struct Arith { typedef float type; };
template <> struct Arith<double> { typedef double type; };

__device__ __forceinline__ float load_value(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ double load_value(const double* p, long long i) { return p[i]; }
__device__ __forceinline__ float load_value(const unsigned short* p, long long i) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p[i]));
    return f;
}

// Storing a value computed in the arithmetic type into the stored type (float16 rounded
// to nearest, as torch's .to(float16)).
__device__ __forceinline__ void store_value(float* p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void store_value(double* p, long long i, double v) { p[i] = v; }
__device__ __forceinline__ void store_value(unsigned short* p, long long i, float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));  // what torch's .to(float16) does
    p[i] = h;
}

template <typename A> struct Box { A x1, y1, x2, y2; };

template <typename T>
__device__ __forceinline__ Box<typename Arith<T>::type> load_box(const T* boxes, long long row) {
    return {load_value(boxes, 4 * row), load_value(boxes, 4 * row + 1),
            load_value(boxes, 4 * row + 2), load_value(boxes, 4 * row + 3)};
}

// IoU of a and b in the order torchvision computes it. Boxes that do not overlap give 0
// (never 0/0), which is what torchvision's NaN comparison amounts to.
template <typename A>
__device__ __forceinline__ A box_iou(const Box<A>& a, const Box<A>& b) {
    const A w = min(a.x2, b.x2) - max(a.x1, b.x1);
    const A h = min(a.y2, b.y2) - max(a.y1, b.y1);
    if (w > 0 && h > 0) {
        const A inter = w * h;
        const A area_a = (a.x2 - a.x1) * (a.y2 - a.y1);
        const A area_b = (b.x2 - b.x1) * (b.y2 - b.y1);
        return inter / (area_a + area_b - inter);
    }
    return A(0);
}

// The threshold arrives as a double and the IoU is compared in double, as torchvision's
// CPU kernel and our numba backends do (a float threshold would round 0.1 up).
template <typename A>
__device__ __forceinline__ bool overlaps(const Box<A>& a, const Box<A>& b, double iou_threshold) {
    return double(box_iou(a, b)) > iou_threshold;
}

__device__ __forceinline__ bool same_label(const long long* labels, long long a, long long b) {
    return labels == nullptr || labels[a] == labels[b];
}

// The rank order of every backend: higher score first, ties by lower input index, NaN
// above everything (where torch.sort(descending=True) puts it), -0.0 equal to 0.0.
// score_key maps a score to an unsigned integer with that order (larger = ranks above),
// so one integer comparison replaces a float one plus NaN checks; `ranks_above` adds the
// index tie-break. A strict total order: counting the items that rank above one gives a
// permutation, whatever the input.
__device__ __forceinline__ unsigned long long score_key(float score) {
    if (score != score) return 0xffffffffull;  // every NaN the same, above +inf
    const unsigned int bits = __float_as_uint(score + 0.0f);  // -0.0 + 0.0 = +0.0
    return (bits >> 31) ? ~bits : (bits | 0x80000000u);
}
__device__ __forceinline__ unsigned long long score_key(double score) {
    if (score != score) return 0xffffffffffffffffull;
    const unsigned long long bits = (unsigned long long)__double_as_longlong(score + 0.0);
    return (bits >> 63) ? ~bits : (bits | 0x8000000000000000ull);
}
// A double's order as a 64-bit key (its bits, the sign bit flipped for positives and every
// bit for negatives; unlike score_key, NaNs and -0.0 keep their own keys): unsigned
// comparison orders the keys as the doubles, so atomicMax reduces doubles (and a minimum is
// the maximum of the complemented keys). key_value is its inverse.
__device__ __forceinline__ unsigned long long order_key(double v) {
    const unsigned long long bits = (unsigned long long)__double_as_longlong(v);
    return bits >> 63 ? ~bits : bits | 0x8000000000000000ull;
}
__device__ __forceinline__ double key_value(unsigned long long key) {
    return __longlong_as_double((long long)(key >> 63 ? key & 0x7fffffffffffffffull : ~key));
}
__device__ __forceinline__ bool ranks_above(unsigned long long key_i, int i, unsigned long long key_j, int j) {
    return key_i > key_j || (key_i == key_j && i < j);
}

// Counting kernels (rank.cu, matrix_fused.cu's select): a block takes COUNT_BOXES items,
// one per lane, and each of its COUNT_WARPS warps counts over a slice of the N others.
// (COUNT_BOXES, COUNT_WARPS, RANK_WARPS and BALLOT_WARPS come from nmsbench.cuda.compile.COMMON_DEFINES.)
// rank.cu and matrix_recompute's rank_kernel: 32 warps, slices of N / 32. Each step of a
// slice waits on a shuffle, so the count is latency-bound: more warps hide it.

// The narrowest unsigned integer that holds score_key of arithmetic type A: float keys
// fit 32 bits, so a counting rank shuffles half as much (one shuffle per item, not two).
template <typename A> struct ScoreKey { typedef unsigned long long type; };
template <> struct ScoreKey<float> { typedef unsigned int type; };

// Counts, in every lane of the warp, the items i of warp `warp`'s slice (of WARPS) of [0, n) that
// rank above the lane's own (key_j, j), with key(i) the key of item i (of key_j's type K).
// The warp loads 32 keys at a time, one per lane (coalesced), and broadcasts them with
// shuffles; the next 32 keys' load is in flight meanwhile. One warp shuffle per item (two
// for a 64-bit K) is the cost: the SM's shuffle throughput bounds a counting rank. The
// whole warp must call it, with the same n and warp in every lane and j = (the same) + lane.
template <int WARPS, typename K, typename Key>
__device__ __forceinline__ int count_above_in_slice(int n, int warp, int lane, K key_j, int j, Key key) {
    const int slice = (n + WARPS - 1) / WARPS;
    const int begin = warp * slice, end = min(n, begin + slice);
    int above = 0;
    K next = begin + lane < end ? K(key(begin + lane)) : K(0);
    for (int base = begin; base < end; base += 32) {
        const K mine = next;
        next = base + 32 + lane < end ? K(key(base + 32 + lane)) : K(0);
        // Whole batches before or after every lane's j (the warp's j are j - lane ... +
        // 31) take one comparison per item (ties rank above j only from before it); the
        // rest, both. The conditions are warp-uniform: the shuffles need the whole warp.
        if (end - base >= 32 && base + 32 <= j - lane) {
#pragma unroll
            for (int k = 0; k < 32; ++k) above += __shfl_sync(0xffffffffu, mine, k) >= key_j;
        } else if (end - base >= 32 && base > j - lane + 31) {
#pragma unroll
            for (int k = 0; k < 32; ++k) above += __shfl_sync(0xffffffffu, mine, k) > key_j;
        } else {
            for (int k = 0; k < min(32, end - base); ++k) {
                const K key_i = __shfl_sync(0xffffffffu, mine, k);
                above += key_i > key_j || (key_i == key_j && base + k < j);
            }
        }
    }
    return above;
}

// +inf in each arithmetic type.
__device__ __forceinline__ float infinity(float) { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double infinity(double) { return __longlong_as_double(0x7ff0000000000000ll); }

// The IoU test of hard_fused, the same decision as `overlaps` (double(iou) > threshold)
// but mostly without the division and the conversion to double: in float, inter > union
// * hi decides "above" and inter < union * lo decides "not above" whenever hi and lo are
// the threshold widened by 2^-20 outward, since the product and the quotient each round
// by at most 2^-24 (relative): only pairs within ~2^-21 of the threshold (and unions
// outside [1e-30, 1e30], where a product could leave the normal range) take the exact
// path. Off (hi = inf, lo = 0: neither test fires) unless 1e-6 < threshold < 1. float64
// boxes always take the exact path.
struct IouThreshold {
    double exact;
    float lo, hi;
    __device__ __forceinline__ explicit IouThreshold(double t) : exact(t) {
        const bool on = t > 1e-6 && t < 1.0;
        lo = on ? __double2float_rd(t * (1.0 - 0x1p-20)) : 0.0f;
        hi = on ? __double2float_ru(t * (1.0 + 0x1p-20)) : infinity(0.0f);
    }
};

__device__ __forceinline__ bool iou_above(float inter, float uni, const IouThreshold& t) {
    if (uni >= 1e-30f && uni <= 1e30f) {
        if (inter > uni * t.hi) return true;
        if (inter < uni * t.lo) return false;
    }
    return double(inter / uni) > t.exact;
}
__device__ __forceinline__ bool iou_above(double inter, double uni, const IouThreshold& t) {
    return inter / uni > t.exact;
}

// overlaps(a, b, t.exact), with the boxes' areas given ((x2 - x1) * (y2 - y1), as box_iou).
template <typename A>
__device__ __forceinline__ bool overlaps_decisive(const Box<A>& a, A area_a, const Box<A>& b, A area_b,
                                                  const IouThreshold& t) {
    const A w = min(a.x2, b.x2) - max(a.x1, b.x1);
    const A h = min(a.y2, b.y2) - max(a.y1, b.y1);
    if (w > 0 && h > 0) {
        const A inter = w * h;
        return iou_above(inter, area_a + area_b - inter, t);
    }
    return false;
}

template <typename A>
__device__ __forceinline__ A box_area(const Box<A>& b) { return (b.x2 - b.x1) * (b.y2 - b.y1); }

// run_nms's value rules for one box, in the arithmetic type A (nmsbench.boxes'
// check_input_values; a score is bad where it is not finite): a kernel that reads every
// box anyway can tell the host whether any breaks them, so that no separate check runs
// (_validate.cu's bad_reason also says which rule, for the check that does run alone).
template <typename A>
__device__ __forceinline__ bool box_is_bad(const Box<A>& b) {
    return !(isfinite(b.x1) && isfinite(b.y1) && isfinite(b.x2) && isfinite(b.y2) && b.x2 >= b.x1 && b.y2 >= b.y1
             && isfinite(box_area(b)));
}

// The same for a row of the inputs, and the report of a bad one: verdict_host is mapped
// pinned memory that the host sets to 0 before the launch and reads after its wait for
// the op; any thread that finds a bad row writes 1 there (all write the same value).
template <typename T>
__device__ __forceinline__ bool row_is_bad(const T* boxes, const T* scores, long long row) {
    typedef typename Arith<T>::type A;
    return box_is_bad(load_box(boxes, row)) || !isfinite(A(load_value(scores, row)));
}
__device__ __forceinline__ void report_bad_row(long long* verdict_host) { *(volatile long long*)verdict_host = 1; }

// The quick rejection of pairs that cannot overlap. A box with x2 <= x1 or y2 <= y1, or
// a NaN coordinate, has IoU 0 or NaN with every box; quick_box turns it into one that
// fails every comparison of may_overlap (and keeps every other box as it is). For two
// quick boxes may_overlap is false only where box_iou is 0 or NaN (w <= 0 or h <= 0, or
// a NaN), so code that acts on IoU > 0 alone may test it first: four comparisons instead
// of the IoU's arithmetic for most pairs, and the exact IoU, from the same (real) boxes,
// for the rest.

template <typename A>
__device__ __forceinline__ Box<A> quick_box(const Box<A>& b) {
    const A inf = infinity(A(0));
    return (b.x2 > b.x1 && b.y2 > b.y1) ? b : Box<A>{inf, inf, -inf, -inf};
}
// Bitwise & on purpose: with && NVRTC branched after every comparison (and reloaded the
// box), which made the matrix passes slower than no test at all.
template <typename A>
__device__ __forceinline__ bool may_overlap(const Box<A>& a, const Box<A>& b) {
    return (a.x2 > b.x1) & (b.x2 > a.x1) & (a.y2 > b.y1) & (b.y2 > a.y1);
}

// The suppression mask of the bitmask families, over boxes in rank order: row i, word w,
// bit k is 1 iff box i suppresses box w * 32 + k (same label, IoU above the threshold, and
// w * 32 + k > i). Rows are written from box i's own word i / 32 on; earlier words are
// never written, and no reader may read them. One warp per row, a ballot per word; the
// block's BALLOT_WARPS rows share their candidates through shared memory, 32 * BALLOT_WARPS
// at a time (one global load per thread and chunk). Launch blocks(n, BALLOT_WARPS) blocks
// of 32 * BALLOT_WARPS threads. Used by bitmask_two_phase (the seed's kernel);
// hard_fused.cu's tile_mask_kernel writes the same mask.

template <typename T>
__global__ void ballot_mask_kernel(const T* sorted_boxes, const long long* sorted_labels, int n, int words,
                                   double iou_threshold, unsigned int* mask) {
    typedef typename Arith<T>::type A;
    __shared__ Box<A> chunk_boxes[32 * BALLOT_WARPS];
    __shared__ long long chunk_labels[32 * BALLOT_WARPS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int first_row = blockIdx.x * BALLOT_WARPS, i = first_row + warp;
    const bool active = i < n;  // the same for all 32 lanes: whole warps
    const Box<A> box_i = active ? load_box(sorted_boxes, i) : Box<A>{0, 0, 0, 0};
    const long long label_i = active && sorted_labels != nullptr ? sorted_labels[i] : 0;
    for (int chunk = first_row / 32 * 32; chunk < n; chunk += 32 * BALLOT_WARPS) {
        __syncthreads();  // the previous chunk is used up before it is replaced
        const int t = chunk + threadIdx.x;
        if (t < n) {
            chunk_boxes[threadIdx.x] = load_box(sorted_boxes, t);
            chunk_labels[threadIdx.x] = sorted_labels != nullptr ? sorted_labels[t] : 0;
        }
        __syncthreads();
        if (!active) continue;
        for (int w = 0; w < BALLOT_WARPS; ++w) {
            const int word = chunk / 32 + w;
            if (word >= words) break;
            if (word < i / 32) continue;
            const int j = word * 32 + lane, slot = w * 32 + lane;
            const bool vote = j > i && j < n && chunk_labels[slot] == label_i &&
                              overlaps(box_i, chunk_boxes[slot], iou_threshold);
            const unsigned int bits = __ballot_sync(0xffffffffu, vote);
            if (lane == 0) mask[(long long)i * words + word] = bits;
        }
    }
}

// Warp reductions, the result in every lane: one redux instruction from sm_80 on.
__device__ __forceinline__ unsigned int warp_or(unsigned int v) {
#if __CUDA_ARCH__ >= 800
    return __reduce_or_sync(0xffffffffu, v);
#else
    for (int offset = 16; offset > 0; offset /= 2) v |= __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
#endif
}
__device__ __forceinline__ int warp_sum(int v) {
#if __CUDA_ARCH__ >= 800
    return __reduce_add_sync(0xffffffffu, v);
#else
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
#endif
}

// Release / acquire at GPU scope: what a thread wrote (and, after a __syncthreads(), what
// its block wrote) before a release add is visible to a thread whose acquire load sees
// that add. Cheaper than __threadfence(), which is a sequentially consistent fence
// (MEMBAR.SC.GPU, where the barrier phases' profiler samples sat).
__device__ __forceinline__ unsigned int atomic_add_release(unsigned int* p, unsigned int v) {
    unsigned int old;
    asm volatile("atom.add.release.gpu.global.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}
__device__ __forceinline__ void red_add_release(unsigned int* p, unsigned int v) {
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// A grid barrier for cooperative launches (cuLaunchCooperativeKernel: every block
// resident at once, or the launch is refused), as cooperative groups' grid.sync() does it:
// block 0 adds 2^31 - (blocks - 1) to `count` and every other block 1, so the top bit
// flips when the last block arrives and the low bits are back where they were (0: one
// word per stream, zeroed once, nmsbench.cuda.grid_barrier_address). One atomic a block, no reset:
// a block that arrives at the next barrier early cannot flip the bit back before every
// block has arrived there too. Each block's thread 0 adds with release after the block's
// __syncthreads and waits with acquire loads, so after the closing __syncthreads plain
// loads see every block's writes from before the barrier.
__device__ __forceinline__ void grid_barrier(unsigned int* count) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1u) : 1u;
        const unsigned int before = atomic_add_release(count, add);
        while (((load_acquire(count) ^ before) & 0x80000000u) == 0u) {
        }
    }
    __syncthreads();
}
