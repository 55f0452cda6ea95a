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

// The rank order of every backend: higher score first, ties by lower input index, and
// NaN above everything (where torch.sort(descending=True) puts it). A strict total order:
// counting the items that rank above one gives a permutation, whatever the input.
template <typename A>
__device__ __forceinline__ bool ranks_above(A score_i, long long i, A score_j, long long j) {
    const bool nan_i = score_i != score_i, nan_j = score_j != score_j;
    if (nan_i || nan_j) return nan_i && (!nan_j || i < j);
    return score_i > score_j || (score_i == score_j && i < j);
}

// Counting kernels (rank.cu, matrix_fused.cu's select): a block takes COUNT_BOXES items,
// one per lane, and each of its COUNT_WARPS warps counts over a slice of the N others.
#define COUNT_BOXES 32
#define COUNT_WARPS 8

// Calls visit(i, value(i)) in every lane of the warp for each i of warp `warp`'s slice of
// [0, n). The warp loads 32 values at a time, one per lane (coalesced), and broadcasts
// them with shuffles, so there is one memory latency per 32 items, not per item. The
// whole warp must call it (the loop bounds are the same in every lane).
template <typename Visit, typename Value>
__device__ __forceinline__ void for_each_in_slice(int n, int warp, int lane, Visit visit, Value value) {
    const int slice = (n + COUNT_WARPS - 1) / COUNT_WARPS;
    const int begin = warp * slice, end = min(n, begin + slice);
    for (int base = begin; base < end; base += 32) {
        const auto mine = base + lane < end ? value(base + lane) : decltype(value(base))(0);
        const int count = min(32, end - base);
        for (int k = 0; k < count; ++k) visit(base + k, __shfl_sync(0xffffffffu, mine, k));
    }
}
