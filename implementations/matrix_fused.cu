// Fused Matrix NMS (seeds/fused-matrix-nms-cuda.txt), with runtime parameters, labels,
// any N and the decayed scores. Boxes arrive sorted by rank. Rows are boxes j, columns
// their candidate parents i (i < j): only tiles on or below the diagonal matter.
//
//   1. iou_tile_kernel   one 16 x 16 block per lower-triangular tile: both box groups in
//                        shared memory, one IoU per thread, stored in packed tile storage
//                        (NOT_A_PARENT where i >= j or the labels differ), plus the row max
//                        of the tile into partial[j][column tile].
//   2. max_reduce_pass   in place, 16 partial maxima -> 1 per pass, until each row holds
//                        cmax_j = max IoU of box j with its parents in partial[j][0].
//   3. decay_kernel      per tile, the candidate decays of box j by each parent i; the
//                        row min of the tile goes to decay_key[j] by atomicMin. No decay
//                        matrix is stored.
//   4. final_score_kernel  decay_j from its key, final score = score * decay, written at
//                        the box's input index.
//
// The decay arithmetic is in double, like the numba backend, so both agree to the last
// bit of the float32 final score in all but rare exp rounding cases.

#define TILE 16
#define NOT_A_PARENT (-1)

template <typename T> struct Store { typedef float type; };  // IoUs and final scores
template <> struct Store<double> { typedef double type; };

__device__ __forceinline__ long long tile_offset(int row_tile, int column_tile) {
    return ((long long)row_tile * (row_tile + 1) / 2 + column_tile) * (TILE * TILE);
}

// Unsigned keys that order like the doubles they encode, so atomicMin finds the minimum.
__device__ __forceinline__ unsigned long long ordered_key(double value) {
    const unsigned long long bits = (unsigned long long)__double_as_longlong(value);
    return (bits >> 63) ? ~bits : (bits | 0x8000000000000000ull);
}
__device__ __forceinline__ double key_value(unsigned long long key) {
    return __longlong_as_double((long long)((key >> 63) ? (key & 0x7fffffffffffffffull) : ~key));
}

// Max / min over the 16 lanes of one tile row (16 consecutive lanes of a warp).
template <typename S>
__device__ __forceinline__ S row_max(S value) {
    for (int offset = TILE / 2; offset > 0; offset /= 2) value = max(value, __shfl_xor_sync(0xffffffffu, value, offset, TILE));
    return value;
}
__device__ __forceinline__ double row_min(double value) {
    for (int offset = TILE / 2; offset > 0; offset /= 2) value = min(value, __shfl_xor_sync(0xffffffffu, value, offset, TILE));
    return value;
}

// grid (tiles, tiles): x = column tile, y = row tile; block (16, 16): x = column, y = row.
// Also writes each row's starting decay key (from the column-0 tile, which every row has).
template <typename T>
__global__ void iou_tile_kernel(const T* boxes, const long long* labels, int n, int tiles,
                                unsigned long long initial_key, typename Store<T>::type* tile_iou,
                                typename Store<T>::type* partial, unsigned long long* decay_key) {
    typedef typename Arith<T>::type A;
    typedef typename Store<T>::type S;
    const int row_tile = blockIdx.y, column_tile = blockIdx.x;
    if (column_tile > row_tile) return;  // above the diagonal: no parent -> child pairs
    __shared__ Box<A> row_boxes[TILE], column_boxes[TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    if (ty == 0 && column_tile * TILE + tx < n) column_boxes[tx] = load_box(boxes, column_tile * TILE + tx);
    if (ty == 1 && row_tile * TILE + tx < n) row_boxes[tx] = load_box(boxes, row_tile * TILE + tx);
    __syncthreads();
    const int j = row_tile * TILE + ty, i = column_tile * TILE + tx;
    S iou = S(NOT_A_PARENT);
    if (i < j && j < n && same_label(labels, i, j)) iou = S(box_iou(column_boxes[tx], row_boxes[ty]));
    tile_iou[tile_offset(row_tile, column_tile) + ty * TILE + tx] = iou;
    const S tile_max = row_max(max(iou, S(0)));
    if (tx == 0 && j < n) {
        partial[(long long)j * tiles + column_tile] = tile_max;
        if (column_tile == 0) decay_key[j] = initial_key;
    }
}

// One pass: row j's first `length` partial maxima become ceil(length / 16). Block (16, 16)
// owns 16 whole rows, so the in-place update races with nobody outside the block, and a
// barrier between each round's reads and writes orders it inside.
template <typename T>
__global__ void max_reduce_pass(typename Store<T>::type* partial, int n, int tiles, int level) {
    typedef typename Store<T>::type S;
    const int j = blockIdx.x * TILE + threadIdx.y;
    const int last_row = min(blockIdx.x * TILE + TILE - 1, n - 1);
    int length = j / TILE + 1, block_length = last_row / TILE + 1;  // valid entries at level 0
    for (int l = 0; l < level; ++l) {
        length = (length + TILE - 1) / TILE;
        block_length = (block_length + TILE - 1) / TILE;
    }
    if (block_length <= 1) return;  // triangular early exit: every row here is reduced
    const int outputs = (length + TILE - 1) / TILE, block_outputs = (block_length + TILE - 1) / TILE;
    S* row = partial + (long long)j * tiles;
    for (int base = 0; base < block_outputs; base += TILE) {
        const int g = base + threadIdx.x;
        const bool mine = j < n && g < outputs;
        S value = S(0);
        if (mine) {
            for (int k = g * TILE; k < min(g * TILE + TILE, length); ++k) value = max(value, row[k]);
        }
        __syncthreads();  // every read of this round before any write of it
        if (mine) row[g] = value;
    }
}

// grid and block as iou_tile_kernel. Gaussian: the key holds min over parents of
// cmax_i^2 - iou_ij^2 (starting at 0); dividing by sigma and exp are monotone, so they
// are applied once per box in final_score_kernel. Linear: the key holds min of
// (1 - iou_ij) / (1 - cmax_i) (starting at 1), skipping parents with cmax_i = 1.
template <typename T>
__global__ void decay_kernel(const typename Store<T>::type* tile_iou, const typename Store<T>::type* partial,
                             int n, int tiles, int linear, unsigned long long* decay_key) {
    const int row_tile = blockIdx.y, column_tile = blockIdx.x;
    if (column_tile > row_tile) return;
    __shared__ double parent_cmax[TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    if (ty == 0) {
        const int i = column_tile * TILE + tx;
        parent_cmax[tx] = i < n ? double(partial[(long long)i * tiles]) : 0.0;
    }
    __syncthreads();
    const int j = row_tile * TILE + ty;
    double candidate = linear ? 1.0 : 0.0;
    if (j < n) {
        const double iou = tile_iou[tile_offset(row_tile, column_tile) + ty * TILE + tx];
        const double cmax = parent_cmax[tx];
        if (iou >= 0.0) {
            if (!linear) candidate = min(candidate, cmax * cmax - iou * iou);
            else if (1.0 - cmax != 0.0) candidate = min(candidate, (1.0 - iou) / (1.0 - cmax));
        }
    }
    const double smallest = row_min(candidate);
    if (tx == 0 && j < n) atomicMin(decay_key + j, ordered_key(smallest));
}

template <typename T>
__global__ void final_score_kernel(const T* sorted_scores, const long long* order, const unsigned long long* decay_key,
                                   int n, int linear, double sigma, typename Store<T>::type* final_by_input) {
    typedef typename Store<T>::type S;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    const double smallest = key_value(decay_key[j]);
    const double decay = linear ? smallest : exp(smallest / sigma);
    final_by_input[order[j]] = S(load_value(sorted_scores, j)) * S(decay);
}
