// weighted_nms's merge on CUDA (the host side is weighted_nms.py): each kept box moves to
// the score-weighted mean of the same-label boxes whose IoU with it is above the
// threshold, itself included, summed in double in input order as the CPU backend does, so
// the result is the same to the last bit.
//
// A warp per kept box, MERGE_WARPS per block; the block stages MERGE_TILE input boxes at a
// time in shared memory. Each lane tests one box of 32 in a row, a ballot gives the boxes
// that count, and every lane adds them in input order (their values by shuffles): the
// tests run 32 at a time, the sums stay serial.
//
// It runs right after the keep, without the host learning the count in between: the grid
// covers n kept boxes and reads the count (*kept_count) on the device; blocks past it end
// at once. out: n rows of 4 in the stored type, the first *kept_count written (each mean
// rounded from double once, to float for float16 as the CPU backend's float32 copy is).
template <typename T>
__global__ void __launch_bounds__(32 * MERGE_WARPS) merge_kernel(const T* boxes, const T* scores,
                                                                 const long long* labels, int n, double iou_threshold,
                                                                 const long long* kept, const long long* kept_count,
                                                                 T* out) {
    typedef typename Arith<T>::type A;
    __shared__ Box<A> tile_box[MERGE_TILE];
    __shared__ A tile_score[MERGE_TILE];
    __shared__ long long tile_label[MERGE_TILE];
    const long long k = *kept_count;
    if ((long long)blockIdx.x * MERGE_WARPS >= k) return;  // the whole block: before any barrier
    const int lane = threadIdx.x % 32, t = blockIdx.x * MERGE_WARPS + threadIdx.x / 32;
    const bool active = t < k;  // warp-uniform; inactive warps still stage tiles
    const long long m = active ? kept[t] : 0;
    const Box<A> box_m = active ? load_box(boxes, m) : Box<A>{0, 0, 0, 0};
    const long long label_m = active && labels != nullptr ? labels[m] : 0;
    double total = 0.0, a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    for (int base = 0; base < n; base += MERGE_TILE) {
        __syncthreads();  // the last tile is used up
        for (int i = threadIdx.x; i < MERGE_TILE && base + i < n; i += blockDim.x) {
            tile_box[i] = load_box(boxes, base + i);
            tile_score[i] = A(load_value(scores, base + i));
            tile_label[i] = labels != nullptr ? labels[base + i] : 0;
        }
        __syncthreads();
        if (!active) continue;
        for (int c = 0; c < MERGE_TILE && base + c < n; c += 32) {
            const int i = c + lane;
            const long long j = base + i;
            const bool counts = j < n && tile_label[i] == label_m && (j == m || overlaps(box_m, tile_box[i], iou_threshold));
            unsigned int left = __ballot_sync(0xffffffffu, counts);
            const Box<A> b = counts ? tile_box[i] : Box<A>{0, 0, 0, 0};
            const double w = counts ? fmax(double(tile_score[i]), 0.0) : 0.0;
            while (left != 0u) {  // in input order, the same in every lane
                const int from = __ffs(left) - 1;
                left &= left - 1u;
                const double wj = __shfl_sync(0xffffffffu, w, from);
                total += wj;
                a0 += wj * __shfl_sync(0xffffffffu, double(b.x1), from);
                a1 += wj * __shfl_sync(0xffffffffu, double(b.y1), from);
                a2 += wj * __shfl_sync(0xffffffffu, double(b.x2), from);
                a3 += wj * __shfl_sync(0xffffffffu, double(b.y2), from);
            }
        }
    }
    if (active && lane == 0) {
        const long long row = 4 * (long long)t;
        if (total > 0.0) {
            store_value(out, row, A(a0 / total)), store_value(out, row + 1, A(a1 / total));
            store_value(out, row + 2, A(a2 / total)), store_value(out, row + 3, A(a3 / total));
        } else {  // every weight 0: the box stays where it is
            store_value(out, row, box_m.x1), store_value(out, row + 1, box_m.y1);
            store_value(out, row + 2, box_m.x2), store_value(out, row + 3, box_m.y2);
        }
    }
}
