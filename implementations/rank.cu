// Ranking by score on the device, shared by every CUDA backend: one launch instead of
// torch.sort + index_select + a labels gather (each a launch and ~15-45 us of host time).
//
// The rank of box j is the number of boxes that rank above it (ranks_above in
// _common.cuh: a strict total order), so the ranks are a permutation and every output
// slot is written exactly once. A block takes 32 boxes, one per lane; each of its
// RANK_WARPS warps counts over a slice of all N scores (count_above_in_slice) and the
// slices' counts are summed in shared memory. O(N^2) comparisons, spread over N * 32
// threads, and the NMS that follows is O(N^2) anyway.

// sorted_scores and sorted_labels may be null (not needed / no labels).
template <typename T>
__global__ void rank_by_score_kernel(const T* boxes, const T* scores, const long long* labels, int n,
                                     long long* order, T* sorted_boxes, T* sorted_scores,
                                     long long* sorted_labels) {
    typedef typename Arith<T>::type A;
    __shared__ int slice_count[RANK_WARPS][COUNT_BOXES];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int j = blockIdx.x * COUNT_BOXES + lane;
    typedef typename ScoreKey<A>::type K;
    const auto key_of = [&](int i) { return K(score_key(A(load_value(scores, i)))); };
    const int count = count_above_in_slice<RANK_WARPS>(n, warp, lane, j < n ? key_of(j) : K(0), j, key_of);
    slice_count[warp][lane] = count;
    __syncthreads();
    if (warp != 0 || j >= n) return;
    int rank = 0;
    for (int w = 0; w < RANK_WARPS; ++w) rank += slice_count[w][lane];
    order[rank] = j;
    for (int c = 0; c < 4; ++c) sorted_boxes[4LL * rank + c] = boxes[4LL * j + c];
    if (sorted_scores != nullptr) sorted_scores[rank] = scores[j];
    if (labels != nullptr) sorted_labels[rank] = labels[j];
}

// Ranking by merging, for large N (O(N log N) work in two launches instead of O(N^2)).
// chunk_sort_kernel sorts each chunk of MERGE_CHUNK boxes by counting in shared memory
// (the chunk's keys and indices in rank order); merge_rank_kernel then finds each box's
// rank as the sum, over all chunks, of how many of the chunk's boxes rank above it: a
// binary search per chunk (its own chunk included, where the box itself does not count).
// The chunks are padded to MERGE_CHUNK with keys that rank below every box (key 0, index
// >= n: no real score has key 0, and ties go to the lower index), so every search takes
// the same 9 steps and reads only written slots.
#define MERGE_CHUNK 256
#define MERGE_LANES 8  // lanes that share one box's searches (chunks c = lane % 8 + 8k)
#define MERGE_BLOCK 256

template <typename T>
__global__ void __launch_bounds__(MERGE_CHUNK) chunk_sort_kernel(const T* scores, int n,
                                                                 unsigned long long* chunk_keys, int* chunk_index) {
    typedef typename Arith<T>::type A;
    __shared__ unsigned long long key[MERGE_CHUNK];
    __shared__ int index[MERGE_CHUNK];
    const int i = blockIdx.x * MERGE_CHUNK + threadIdx.x;
    const unsigned long long my_key = i < n ? score_key(A(load_value(scores, i))) : 0ull;
    key[threadIdx.x] = my_key;
    index[threadIdx.x] = i;
    __syncthreads();
    int above = 0;
#pragma unroll 8
    for (int k = 0; k < MERGE_CHUNK; ++k) above += ranks_above(key[k], index[k], my_key, i);
    chunk_keys[blockIdx.x * MERGE_CHUNK + above] = my_key;
    chunk_index[blockIdx.x * MERGE_CHUNK + above] = i;
}

// sorted_scores and sorted_labels may be null, as in rank_by_score_kernel.
template <typename T>
__global__ void __launch_bounds__(MERGE_BLOCK) merge_rank_kernel(const T* boxes, const T* scores, const long long* labels,
                                                                 int n, int chunks,
                                                                 const unsigned long long* chunk_keys,
                                                                 const int* chunk_index, long long* order,
                                                                 T* sorted_boxes, T* sorted_scores,
                                                                 long long* sorted_labels) {
    typedef typename Arith<T>::type A;
    const int j = (blockIdx.x * MERGE_BLOCK + threadIdx.x) / MERGE_LANES;
    const int first_chunk = threadIdx.x % MERGE_LANES;
    const unsigned long long key_j = j < n ? score_key(A(load_value(scores, j))) : 0ull;
    // A box past n (the last block's tail) searches too, for nothing: the shuffles below
    // need the whole warp.
    int above = 0;
    constexpr int TOGETHER = 4;  // searches in flight per thread
    for (int c0 = first_chunk; c0 < chunks; c0 += TOGETHER * MERGE_LANES) {
        int at[TOGETHER];
#pragma unroll
        for (int u = 0; u < TOGETHER; ++u) at[u] = min(c0 + u * MERGE_LANES, chunks - 1) * MERGE_CHUNK;
        // Branch-free lower bound: after the steps, at[u] - chunk start = how many rank above j.
#pragma unroll
        for (int step = MERGE_CHUNK / 2; step >= 1; step /= 2) {
#pragma unroll
            for (int u = 0; u < TOGETHER; ++u) {
                const int probe = at[u] + step - 1;
                at[u] += ranks_above(chunk_keys[probe], chunk_index[probe], key_j, j) ? step : 0;
            }
        }
#pragma unroll
        for (int u = 0; u < TOGETHER; ++u) {
            const int count = at[u] % MERGE_CHUNK + (ranks_above(chunk_keys[at[u]], chunk_index[at[u]], key_j, j) ? 1 : 0);
            above += c0 + u * MERGE_LANES < chunks ? count : 0;  // a clamped duplicate counts nothing
        }
    }
#pragma unroll
    for (int width = 1; width < MERGE_LANES; width *= 2) above += __shfl_xor_sync(0xffffffffu, above, width);
    if (first_chunk != 0 || j >= n) return;
    order[above] = j;
    for (int c = 0; c < 4; ++c) sorted_boxes[4LL * above + c] = boxes[4LL * j + c];
    if (sorted_scores != nullptr) sorted_scores[above] = scores[j];
    if (labels != nullptr) sorted_labels[above] = labels[j];
}
