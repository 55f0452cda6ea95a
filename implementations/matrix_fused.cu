// Fused Matrix NMS (seeds/fused-matrix-nms-cuda.txt), with runtime parameters, labels,
// any N and the decayed scores. Boxes arrive ranked (rank.cu). Rows are boxes j, columns
// their candidate parents i (i < j): only tiles on or below the diagonal matter, and only
// those are stored, packed row after row (tile t of row tile r, column tile c is
// t = r (r + 1) / 2 + c), so a row tile's tiles are contiguous.
//
//   1. iou_tile_kernel   16 x 16 tiles, TILES_PER_BLOCK consecutive packed tiles per block
//                        (no blocks for the upper triangle): the tiles' box groups in
//                        shared memory, one IoU per thread and tile (NOT_A_PARENT where
//                        i >= j or the labels differ), and each tile's row max into
//                        partial[column tile][j].
//   2. max_reduce_kernel in place, 16 partial maxima -> 1 per level, until partial[0][j]
//                        holds cmax_j, box j's max IoU with its parents. A block owns 16
//                        whole rows, so all levels run in one launch.
//   3. decay_kernel      reads the stored IoUs back: each row's minimum candidate decay,
//                        a long row tile split over several blocks, the last of which to
//                        finish combines the splits and writes final = score * decay at
//                        the box's input index. No decay matrix, no atomics on the minimum.
//   4. select_kernel     keeps final >= score_threshold and writes the kept input indices
//                        and scores ordered by final score (ties: lower input index), and
//                        their count in kept[n]: the one value the host waits for.
//
// The decay arithmetic is in double, like the numba backend, so both agree to the last
// bit of the float32 final score in all but rare exp rounding cases.

#define DECAY_BATCH 4  // column tiles whose loads a thread issues together
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

// grid: packed tiles / TILES_PER_BLOCK; block (16, 16): x = column, y = row.
template <typename T>
__global__ void iou_tile_kernel(const T* boxes, const long long* labels, int n, long long packed_tiles,
                                typename Store<T>::type* tile_iou, typename Store<T>::type* partial) {
    typedef typename Arith<T>::type A;
    typedef typename Store<T>::type S;
    __shared__ Box<A> column_boxes[TILES_PER_BLOCK][TILE], row_boxes[TILES_PER_BLOCK][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long first = (long long)blockIdx.x * TILES_PER_BLOCK;
    {  // thread ty * 16 + tx loads one box: of tile k, column box `which` or row box which - 16
        const int k = (ty * TILE + tx) / (2 * TILE), which = (ty * TILE + tx) % (2 * TILE);
        if (first + k < packed_tiles) {
            int r, c;
            tile_position(first + k, r, c);
            const int box = which < TILE ? c * TILE + which : r * TILE + which - TILE;
            if (box < n) {
                if (which < TILE) column_boxes[k][which] = load_box(boxes, box);
                else row_boxes[k][which - TILE] = load_box(boxes, box);
            }
        }
    }
    __syncthreads();
    int row_tile, column_tile;
    tile_position(first, row_tile, column_tile);
    for (int k = 0; k < TILES_PER_BLOCK && first + k < packed_tiles; ++k) {
        const int j = row_tile * TILE + ty, i = column_tile * TILE + tx;
        S iou = S(NOT_A_PARENT);
        if (i < j && j < n && same_label(labels, i, j)) iou = S(box_iou(column_boxes[k][tx], row_boxes[k][ty]));
        tile_iou[(first + k) * (TILE * TILE) + ty * TILE + tx] = iou;
        const S tile_max = row_max(max(iou, S(0)));
        if (tx == 0 && j < n) partial[(long long)column_tile * n + j] = tile_max;
        if (++column_tile > row_tile) {  // the next packed tile starts the next row tile
            ++row_tile;
            column_tile = 0;
        }
    }
}

// Each level turns row j's first `length` partial maxima into ceil(length / 16). Block
// (16, 16) owns 16 whole rows (x = row, y = output within a round), so the in-place
// update races with nobody outside the block; inside, a barrier separates each round's
// reads from its writes and each level from the next. Rows near the top need fewer
// levels (triangular early exit). Also zeroes decay_kernel's and select_kernel's counters.
template <typename T>
__global__ void max_reduce_kernel(typename Store<T>::type* partial, int n, int* splits_done, long long* kept) {
    typedef typename Store<T>::type S;
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        splits_done[blockIdx.x] = 0;
        if (blockIdx.x == 0) kept[n] = 0;
    }
    const int j = blockIdx.x * TILE + threadIdx.x;
    const int last_row = min(blockIdx.x * TILE + TILE - 1, n - 1);
    int length = j / TILE + 1, block_length = last_row / TILE + 1;  // valid entries at level 0
    while (block_length > 1) {  // the same in every thread of the block
        const int outputs = (length + TILE - 1) / TILE, block_outputs = (block_length + TILE - 1) / TILE;
        for (int base = 0; base < block_outputs; base += TILE) {
            const int g = base + threadIdx.y;
            const bool mine = j < n && g < outputs;
            S value = S(0);
            if (mine) {
                for (int k = g * TILE; k < min(g * TILE + TILE, length); ++k) value = max(value, partial[(long long)k * n + j]);
            }
            __syncthreads();  // every read of this round before any write of it
            if (mine) partial[(long long)g * n + j] = value;
        }
        __syncthreads();  // this level's writes before the next level's reads
        length = outputs;
        block_length = block_outputs;
    }
}

// score_j * decay_j, from the row's minimum candidate decay (see decay_kernel).
template <typename T>
__device__ __forceinline__ typename Store<T>::type final_score(const T* sorted_scores, int j, double smallest,
                                                              int linear, double sigma) {
    typedef typename Store<T>::type S;
    const double decay = linear ? smallest : exp(smallest / sigma);
    return S(load_value(sorted_scores, j)) * S(decay);
}

// grid (most splits, row tiles), the longest row tiles first; block (16, 16). Row tile r is
// split over splits(r) = min(most splits, ceil((r + 1) / TILES_PER_SPLIT)) blocks (the
// others leave at once); split s takes column tiles s, s + splits(r), ... Gaussian: each
// row keeps the min over parents of cmax_i^2 - iou_ij^2 (starting at 0); dividing by
// sigma and exp are monotone, so they are applied once per box. Linear: the min of
// (1 - iou_ij) / (1 - cmax_i) (starting at 1), skipping parents with cmax_i = 1. A min is
// exact and order-free, so the result is deterministic.
template <typename T>
__global__ void decay_kernel(const typename Store<T>::type* tile_iou, const typename Store<T>::type* cmax,
                             const T* sorted_scores, const long long* order, int n, int tiles, int linear,
                             double sigma, double* split_min, int* splits_done,
                             typename Store<T>::type* final_by_input) {
    typedef typename Store<T>::type S;
    __shared__ bool last_split;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int split = blockIdx.x, row_tile = tiles - 1 - blockIdx.y;
    const int splits = min((int)gridDim.x, (row_tile + TILES_PER_SPLIT) / TILES_PER_SPLIT);
    if (split >= splits) return;  // the same in the whole block
    const int j = row_tile * TILE + ty;
    const S* row_tiles = tile_iou + (long long)row_tile * (row_tile + 1) / 2 * (TILE * TILE);
    double candidate = linear ? 1.0 : 0.0;
    for (int first = split; first <= row_tile; first += DECAY_BATCH * splits) {
        // Issue the batch's loads before using any: one memory latency per batch.
        double iou[DECAY_BATCH], parent_cmax[DECAY_BATCH];
#pragma unroll
        for (int b = 0; b < DECAY_BATCH; ++b) {
            const int column_tile = first + b * splits, i = column_tile * TILE + tx;
            const bool stored = column_tile <= row_tile;
            iou[b] = stored ? double(row_tiles[(long long)column_tile * (TILE * TILE) + ty * TILE + tx]) : NOT_A_PARENT;
            parent_cmax[b] = stored && i < n ? double(cmax[i]) : 0.0;
        }
#pragma unroll
        for (int b = 0; b < DECAY_BATCH; ++b) {
            if (iou[b] < 0.0) continue;  // not a parent (i >= j, j >= n or another label)
            if (!linear) candidate = min(candidate, parent_cmax[b] * parent_cmax[b] - iou[b] * iou[b]);
            else if (1.0 - parent_cmax[b] != 0.0) candidate = min(candidate, (1.0 - iou[b]) / (1.0 - parent_cmax[b]));
        }
    }
    candidate = row_min(candidate);
    if (splits == 1) {
        if (tx == 0 && j < n) final_by_input[order[j]] = final_score<T>(sorted_scores, j, candidate, linear, sigma);
        return;
    }
    if (tx == 0 && j < n) split_min[(long long)split * n + j] = candidate;
    // The last split of this row tile to finish combines them (CUDA's threadFenceReduction
    // pattern): each split's writes are made visible before it is counted as done.
    __threadfence();
    __syncthreads();
    if (tx == 0 && ty == 0) last_split = atomicAdd(splits_done + row_tile, 1) == splits - 1;
    __syncthreads();
    if (!last_split || tx != 0 || j >= n) return;
    __threadfence();
    double smallest = candidate;
    for (int s = 0; s < splits; ++s) smallest = min(smallest, ((volatile double*)split_min)[(long long)s * n + j]);
    final_by_input[order[j]] = final_score<T>(sorted_scores, j, smallest, linear, sigma);
}

// Box j (input index) is kept iff final_j >= score_threshold, compared in the stored type
// as torch compares a tensor with a Python float. Its output position is the number of
// kept boxes that rank above it (ranks_above: higher final score, ties by lower index),
// counted as rank.cu counts ranks.
template <typename T>
__global__ void select_kernel(const typename Store<T>::type* final_by_input, int n, double score_threshold,
                              long long* kept, typename Store<T>::type* kept_scores) {
    typedef typename Store<T>::type S;
    __shared__ int slice_count[COUNT_WARPS][COUNT_BOXES];
    const S threshold = S(score_threshold);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int j = blockIdx.x * COUNT_BOXES + lane;
    const S final_j = j < n ? final_by_input[j] : S(0);
    const bool keep_j = j < n && final_j >= threshold;
    // Boxes below the threshold get key 0, under every kept box's key (a kept score is
    // never NaN, and no other float maps to 0), so they never count as above one.
    const auto key = [&](int i) { const S f = final_by_input[i]; return f >= threshold ? score_key(f) : 0ull; };
    int count = 0;
    if (__any_sync(0xffffffffu, keep_j)) count = count_above_in_slice<COUNT_WARPS>(n, warp, lane, keep_j ? key(j) : 0ull, j, key);
    slice_count[warp][lane] = count;
    __syncthreads();
    if (warp != 0) return;
    const unsigned int voters = __ballot_sync(0xffffffffu, keep_j);
    if (lane == 0 && voters != 0u) atomicAdd((unsigned long long*)(kept + n), (unsigned long long)__popc(voters));
    if (!keep_j) return;
    int position = 0;
    for (int w = 0; w < COUNT_WARPS; ++w) position += slice_count[w][lane];
    kept[position] = j;
    kept_scores[position] = final_j;
}
