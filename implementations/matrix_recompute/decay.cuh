// matrix_recompute.cu's arithmetic: IoUs with precomputed areas, the two passes' steps and
// their float shortcuts, the final score and the atomics that combine partial results;
// included by it before its kernels (CudaModule.source puts this text in place of the #include).

__device__ __forceinline__ long long load_label(const void* labels, long long i, int wide) {
    return wide ? ((const long long*)labels)[i] : (long long)((const int*)labels)[i];
}

// IoU with the areas precomputed ((x2 - x1) * (y2 - y1), the same rounding as box_iou).
template <typename A>
__device__ __forceinline__ A iou_with_areas(const Box<A>& a, A area_a, const Box<A>& b, A area_b) {
    const A w = min(a.x2, b.x2) - max(a.x1, b.x1);
    const A h = min(a.y2, b.y2) - max(a.y1, b.y1);
    if (w > 0 && h > 0) {
        const A inter = w * h;
        return inter / (area_a + area_b - inter);
    }
    return A(0);
}

// What a parent contributes besides its IoU: gaussian cmax^2, linear 1 - cmax.
__device__ __forceinline__ double parent_constant(double cmax, int linear) {
    return linear ? 1.0 - cmax : cmax * cmax;
}

// Gaussian: the min over parents of cmax_i^2 - iou_ij^2 (start 0; exp(min / sigma) is
// applied once per box: both monotone). Linear: the min of (1 - iou_ij) / (1 - cmax_i)
// (start 1), skipping parents with 1 - cmax_i == 0 (they constrain nothing). A parent
// with IoU 0 changes neither (cmax^2 >= 0 >= candidate; 1 / (1 - cmax) >= 1 >= candidate),
// so the callers skip it: no double arithmetic for pairs that do not overlap.
__device__ __forceinline__ double decay_step(double candidate, double constant, double iou, int linear) {
    if (!linear) return min(candidate, constant - iou * iou);
    if (constant != 0.0) return min(candidate, (1.0 - iou) / constant);
    return candidate;
}

// The float shortcuts of both passes. Each skips a parent whose exact step provably
// changes nothing, and takes the exact step otherwise, so results stay bit for bit those
// of the plain loops (and the CPU's); float64 boxes always take the exact steps.
//
// Pass 1, a child's running max IoU with its parents. A parent with inter < union *
// best * (1 - 1e-5) has an IoU below best after rounding (each float product rounds by at
// most 2^-24), so the division is skipped: after the first large IoU most parents are.
// Only where the product is a normal float of a finite union (else the division runs).
template <typename A> struct MaxIou;
template <> struct MaxIou<float> {
    float best = 0.0f, skip_below = 0.0f;  // skip_below: best * (1 - 1e-5)
    __device__ __forceinline__ void add(const Box<float>& parent, float parent_area, const Box<float>& me, float my_area) {
        const float w = min(parent.x2, me.x2) - max(parent.x1, me.x1);
        const float h = min(parent.y2, me.y2) - max(parent.y1, me.y1);
        if (!(w > 0.0f && h > 0.0f)) return;
        const float inter = w * h;
        const float uni = parent_area + my_area - inter;  // iou_with_areas's order
        const float bound = uni * skip_below;
        if (bound >= 1e-30f && uni <= 1e30f && inter < bound) return;
        best = max(best, inter / uni);
        skip_below = best * (1.0f - 1e-5f);
    }
};
template <> struct MaxIou<double> {
    double best = 0.0;
    __device__ __forceinline__ void add(const Box<double>& parent, double parent_area, const Box<double>& me, double my_area) {
        best = max(best, iou_with_areas(parent, parent_area, me, my_area));
    }
};

// A parent's constant in float for pass 2's shortcut: gaussian float(cmax^2), linear
// float(1 / (1 - cmax)) (0 when 1 - cmax == 0: decay_step skips that parent anyway).
__device__ __forceinline__ float quick_constant(double constant, int linear) {
    return linear ? (constant != 0.0 ? float(1.0 / constant) : 0.0f) : float(constant);
}

// Pass 2, a child's minimum candidate decay over its parents (iou > 0 only, as decay_step
// says). `quick` is float(candidate). Gaussian: the float value c - iou^2 is within
// 3 * 2^-24 of the double one (all values in [-1, 1]), so one >= quick + 2^-20 cannot
// lower the minimum. Linear: (1 - iou) * float(1 / c) is within ~4 * 2^-24 relative of
// (1 - iou) / c, so one >= quick * (1 + 2^-20) cannot either (only while quick is a
// normal float). Everything else takes decay_step in double, reading the parent's
// double constant only then (the cooperative kernel keeps those in global memory).
// (`skips` is the shortcut, `step` the exact step: the cooperative kernel derives the
// constant from the parent's cmax only when it steps.)
template <typename A> struct MinDecay;
template <> struct MinDecay<float> {
    double candidate;
    float quick;
    __device__ __forceinline__ explicit MinDecay(int linear) : candidate(linear ? 1.0 : 0.0), quick(linear ? 1.0f : 0.0f) {}
    __device__ __forceinline__ bool skips(float iou, float constant_f, int linear) const {
        return linear ? quick >= 1e-30f && (1.0f - iou) * constant_f >= quick * (1.0f + 0x1p-20f)
                      : constant_f - iou * iou >= quick + 0x1p-20f;
    }
    __device__ __forceinline__ void step(float iou, double constant, int linear) {
        candidate = decay_step(candidate, constant, double(iou), linear);
        quick = float(candidate);
    }
    __device__ __forceinline__ void add(float iou, const double* constant, float constant_f, int linear) {
        if (!skips(iou, constant_f, linear)) step(iou, *constant, linear);
    }
};
template <> struct MinDecay<double> {
    double candidate;
    __device__ __forceinline__ explicit MinDecay(int linear) : candidate(linear ? 1.0 : 0.0) {}
    __device__ __forceinline__ bool skips(double, float, int) const { return false; }
    __device__ __forceinline__ void step(double iou, double constant, int linear) {
        candidate = decay_step(candidate, constant, iou, linear);
    }
    __device__ __forceinline__ void add(double iou, const double* constant, float, int linear) {
        step(iou, *constant, linear);
    }
};

template <typename A>
__device__ __forceinline__ A final_score(A score, double smallest, int linear, double sigma) {
    const double decay = linear ? smallest : exp(smallest / sigma);
    return score * A(decay);  // as the CPU: score * decay.to(score dtype)
}

// A double as an unsigned integer with the same order (for atomicMin on mixed signs).
__device__ __forceinline__ unsigned long long ordered_key(double v) {
    const unsigned long long bits = (unsigned long long)__double_as_longlong(v);
    return (bits >> 63) ? ~bits : (bits | 0x8000000000000000ull);
}
__device__ __forceinline__ double from_ordered_key(unsigned long long k) {
    return __longlong_as_double((long long)((k >> 63) ? (k & 0x7fffffffffffffffull) : ~k));
}
#define NO_CANDIDATE 0xffffffffffffffffull  // above every ordered_key: no atomicMin happened

// IoUs are >= 0, and non-negative floats order as their bit patterns.
__device__ __forceinline__ void atomic_max_nonnegative(float* p, float v) {
    atomicMax((unsigned int*)p, __float_as_uint(v));
}
__device__ __forceinline__ void atomic_max_nonnegative(double* p, double v) {
    atomicMax((unsigned long long*)p, (unsigned long long)__double_as_longlong(v));
}
