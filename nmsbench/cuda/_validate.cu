// The value checks of an NMS call's inputs in one pass on the device (the rules of
// nmsbench.boxes.validate_nms_inputs): a row is bad where a coordinate or its score is NaN
// or Inf, where x2 < x1 or y2 < y1, or where its area (x2 - x1) * (y2 - y1) overflows the
// arithmetic type (float16 is computed in float32, as the other kernels do).
//
// The verdict is 0 for valid input, else (1 + the first bad row) * 8 + the reason
// (VALIDATE_*, passed to NVRTC from nmsbench.boxes.VERDICT_REASONS). A thread checks one
// row; a block reduces its rows to the first bad one, encoded so that a larger value means
// an earlier row; with several blocks each adds its value to scratch[0] by atomicMax and
// takes a ticket from scratch[1], and the block with the last ticket publishes the verdict
// and leaves both words at 0 (for the next launch on the stream that shares them). No
// block waits for another.

template <typename T>
__device__ __forceinline__ unsigned int bad_reason(const T* boxes, const T* scores, long long row) {
    typedef typename Arith<T>::type A;
    const Box<A> b = load_box(boxes, row);
    if (!(isfinite(b.x1) && isfinite(b.y1) && isfinite(b.x2) && isfinite(b.y2)))
        return VALIDATE_BOX_NOT_FINITE;
    if (!isfinite(load_value(scores, row))) return VALIDATE_SCORE_NOT_FINITE;
    if (b.x2 < b.x1) return VALIDATE_X_REVERSED;
    if (b.y2 < b.y1) return VALIDATE_Y_REVERSED;
    if (!isfinite((b.x2 - b.x1) * (b.y2 - b.y1))) return VALIDATE_AREA_OVERFLOW;
    return 0;
}

__device__ __forceinline__ unsigned int block_max(unsigned int value, unsigned int* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    for (int offset = 16; offset > 0; offset >>= 1) value = max(value, __shfl_down_sync(0xffffffffu, value, offset));
    if (lane == 0) shared[warp] = value;
    __syncthreads();
    if (warp == 0) {
        value = lane < warps ? shared[lane] : 0u;
        for (int offset = 16; offset > 0; offset >>= 1) value = max(value, __shfl_down_sync(0xffffffffu, value, offset));
    }
    return value;  // the block's maximum, in thread 0
}

// n < 2^28, so that (n - row) * 8 + reason fits 31 bits; blockDim.x a multiple of 32 (at
// most 1024) and gridDim.x * blockDim.x >= n. scratch: two words at 0 (unused with one
// block); verdict_host (mapped pinned memory) and verdict_device may each be null.
template <typename T>
__global__ void validate_kernel(const T* boxes, const T* scores, int n, unsigned int* scratch,
                                long long* verdict_host, long long* verdict_device) {
    __shared__ unsigned int warp_values[32];
    const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int value = 0;  // (n - row) * 8 + reason where the row is bad, else 0
    if (row < n) {
        const unsigned int reason = bad_reason(boxes, scores, row);
        if (reason) value = (unsigned int)(n - row) * 8u + reason;
    }
    value = block_max(value, warp_values);
    if (threadIdx.x != 0) return;
    if (gridDim.x > 1) {
        if (value) atomicMax(&scratch[0], value);
        __threadfence();
        if (atomicAdd(&scratch[1], 1u) != gridDim.x - 1) return;
        __threadfence();
        value = atomicExch(&scratch[0], 0u);
        scratch[1] = 0u;
    }
    const long long verdict = value ? (long long)(n - (value >> 3) + 1) * 8 + (value & 7u) : 0;
    if (verdict_device) *verdict_device = verdict;
    if (verdict_host) {
        *(volatile long long*)verdict_host = verdict;
        __threadfence_system();
    }
}
