// Fused Matrix NMS (seeds/fused-matrix-nms-cuda.txt), with runtime parameters, labels,
// any N and the decayed scores. Boxes arrive ranked (rank.cu). Rows are boxes j, columns
// their candidate parents i (i < j): only tiles on or below the diagonal matter, and only
// those are stored, packed row after row (tile t of row tile r, column tile c is
// t = r (r + 1) / 2 + c), so a row tile's tiles are contiguous.
//
//   1. iou_tile_kernel   a 16 x 16 tile per thread block slice, TILES_PER_BLOCK slices per
//                        block over consecutive packed tiles (no blocks for the upper
//                        triangle): both box groups in shared memory, one IoU per thread
//                        (NOT_A_PARENT where i >= j or the labels differ), plus the tile's
//                        row max into partial[j][column tile].
//   2. max_reduce_kernel in place, 16 partial maxima -> 1 per level, until each row holds
//                        cmax_j = max IoU of box j with its parents in partial[j][0]. A
//                        block owns 16 whole rows, so all levels run in one launch.
//   3. decay_kernel      a block per row tile walks its stored tiles and keeps each row's
//                        minimum candidate decay (no decay matrix, no atomics), then
//                        writes final = score * decay at the box's input index.
//   4. select_kernel     keeps final >= score_threshold and writes the kept input indices
//                        and scores ordered by final score (ties: lower input index), and
//                        their count in kept[n]: the one value the host waits for.
//
// The decay arithmetic is in double, like the numba backend, so both agree to the last
// bit of the float32 final score in all but rare exp rounding cases.

#define TILE 16
#define TILES_PER_BLOCK 4
#define DECAY_GROUPS 4
#define SELECT_THREADS 256
#define NOT_A_PARENT (-1)

template <typename T> struct Store { typedef float type; };  // IoUs and final scores
template <> struct Store<double> { typedef double type; };

// Row tile and column tile of packed tile t (t = r (r + 1) / 2 + c, 0 <= c <= r).
__device__ __forceinline__ void tile_position(long long t, int& row_tile, int& column_tile) {
    int r = int((sqrt(8.0 * double(t) + 1.0) - 1.0) / 2.0);
    while ((long long)(r + 1) * (r + 2) / 2 <= t) ++r;  // correct the sqrt's rounding
    while ((long long)r * (r + 1) / 2 > t) --r;
    row_tile = r;
    column_tile = int(t - (long long)r * (r + 1) / 2);
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

// grid: packed tiles / TILES_PER_BLOCK; block (16, 16, TILES_PER_BLOCK): x = column,
// y = row, z = which of the block's tiles. A z slice is 8 whole warps, so a slice past the
// last tile leaves without splitting a warp.
template <typename T>
__global__ void iou_tile_kernel(const T* boxes, const long long* labels, int n, int tiles, long long packed_tiles,
                                typename Store<T>::type* tile_iou, typename Store<T>::type* partial) {
    typedef typename Arith<T>::type A;
    typedef typename Store<T>::type S;
    __shared__ Box<A> row_boxes[TILES_PER_BLOCK][TILE], column_boxes[TILES_PER_BLOCK][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
    const long long t = (long long)blockIdx.x * TILES_PER_BLOCK + tz;
    int row_tile = 0, column_tile = 0;
    if (t < packed_tiles) {
        tile_position(t, row_tile, column_tile);
        if (ty == 0 && column_tile * TILE + tx < n) column_boxes[tz][tx] = load_box(boxes, column_tile * TILE + tx);
        if (ty == 1 && row_tile * TILE + tx < n) row_boxes[tz][tx] = load_box(boxes, row_tile * TILE + tx);
    }
    __syncthreads();
    if (t >= packed_tiles) return;
    const int j = row_tile * TILE + ty, i = column_tile * TILE + tx;
    S iou = S(NOT_A_PARENT);
    if (i < j && j < n && same_label(labels, i, j)) iou = S(box_iou(column_boxes[tz][tx], row_boxes[tz][ty]));
    tile_iou[t * (TILE * TILE) + ty * TILE + tx] = iou;
    const S tile_max = row_max(max(iou, S(0)));
    if (tx == 0 && j < n) partial[(long long)j * tiles + column_tile] = tile_max;
}

// Each level turns row j's first `length` partial maxima into ceil(length / 16). Block
// (16, 16) owns 16 whole rows, so the in-place update races with nobody outside the
// block; inside, a barrier separates each round's reads from its writes and each level
// from the next. Rows need fewer levels near the top (triangular early exit).
template <typename T>
__global__ void max_reduce_kernel(typename Store<T>::type* partial, int n, int tiles) {
    typedef typename Store<T>::type S;
    const int j = blockIdx.x * TILE + threadIdx.y;
    const int last_row = min(blockIdx.x * TILE + TILE - 1, n - 1);
    int length = j / TILE + 1, block_length = last_row / TILE + 1;  // valid entries at level 0
    S* row = partial + (long long)j * tiles;
    while (block_length > 1) {  // the same in every thread of the block
        const int outputs = (length + TILE - 1) / TILE, block_outputs = (block_length + TILE - 1) / TILE;
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
        __syncthreads();  // this level's writes before the next level's reads
        length = outputs;
        block_length = block_outputs;
    }
}

// grid: one block per row tile, the longest rows first; block (16, 16, DECAY_GROUPS):
// slice z takes column tiles z, z + DECAY_GROUPS, ... Gaussian: each row keeps the min
// over parents of cmax_i^2 - iou_ij^2 (starting at 0); dividing by sigma and exp are
// monotone, so they are applied once per box. Linear: the min of (1 - iou_ij) /
// (1 - cmax_i) (starting at 1), skipping parents with cmax_i = 1. A min is exact and
// order-free, so the result is deterministic. Also zeroes select_kernel's counter.
template <typename T>
__global__ void decay_kernel(const typename Store<T>::type* tile_iou, const typename Store<T>::type* partial,
                             const T* sorted_scores, const long long* order, int n, int tiles, int linear,
                             double sigma, typename Store<T>::type* final_by_input, long long* kept) {
    typedef typename Store<T>::type S;
    __shared__ double group_min[DECAY_GROUPS][TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
    const int row_tile = tiles - 1 - blockIdx.x;
    const S* row_tiles = tile_iou + (long long)row_tile * (row_tile + 1) / 2 * (TILE * TILE);
    double candidate = linear ? 1.0 : 0.0;
    for (int column_tile = tz; column_tile <= row_tile; column_tile += DECAY_GROUPS) {
        const double iou = row_tiles[(long long)column_tile * (TILE * TILE) + ty * TILE + tx];
        if (iou >= 0.0) {  // a parent: i < j < n, same label
            const double cmax = partial[(long long)(column_tile * TILE + tx) * tiles];
            if (!linear) candidate = min(candidate, cmax * cmax - iou * iou);
            else if (1.0 - cmax != 0.0) candidate = min(candidate, (1.0 - iou) / (1.0 - cmax));
        }
    }
    group_min[tz][ty][tx] = candidate;
    __syncthreads();
    if (tz == 0) {  // 8 whole warps
        for (int g = 1; g < DECAY_GROUPS; ++g) candidate = min(candidate, group_min[g][ty][tx]);
        const double smallest = row_min(candidate);
        const int j = row_tile * TILE + ty;
        if (tx == 0 && j < n) {
            const double decay = linear ? smallest : exp(smallest / sigma);
            final_by_input[order[j]] = S(load_value(sorted_scores, j)) * S(decay);
        }
    }
    if (blockIdx.x == 0 && tx == 0 && ty == 0 && tz == 0) kept[n] = 0;
}

// Box j (input index) is kept iff final_j >= score_threshold, compared in the stored type
// as torch compares a tensor with a Python float. Its output position is the number of
// kept boxes that rank above it (ranks_above: higher final score, ties by lower index).
template <typename T>
__global__ void select_kernel(const typename Store<T>::type* final_by_input, int n, double score_threshold,
                              long long* kept, typename Store<T>::type* kept_scores) {
    typedef typename Store<T>::type S;
    __shared__ S chunk[SELECT_THREADS];
    const S threshold = S(score_threshold);
    const int j = blockIdx.x * SELECT_THREADS + threadIdx.x;
    const S final_j = j < n ? final_by_input[j] : S(0);
    const bool keep_j = j < n && final_j >= threshold;
    int position = 0;
    for (int base = 0; base < n; base += SELECT_THREADS) {
        __syncthreads();
        if (base + threadIdx.x < n) chunk[threadIdx.x] = final_by_input[base + threadIdx.x];
        __syncthreads();
        const int count = min(SELECT_THREADS, n - base);
        if (keep_j) {
            for (int k = 0; k < count; ++k) position += chunk[k] >= threshold && ranks_above(chunk[k], base + k, final_j, j);
        }
    }
    const unsigned int voters = __ballot_sync(0xffffffffu, keep_j);
    if (threadIdx.x % 32 == 0 && voters != 0u) atomicAdd((unsigned long long*)(kept + n), (unsigned long long)__popc(voters));
    if (keep_j) {
        kept[position] = j;
        kept_scores[position] = final_j;
    }
}
