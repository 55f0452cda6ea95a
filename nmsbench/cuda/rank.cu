// Ranking by score on the device, shared by every CUDA backend: one launch (three from
// 8193 boxes) instead of torch.sort + index_select + a labels gather (each a launch and
// host work around it, with the GPU idle behind it).
//
// Up to 8192 boxes, counting: the rank of box j is the number of boxes that rank above
// it (ranks_above in _common.cuh: a strict total order), so the ranks are a permutation
// and every output slot is written exactly once. A block takes 32 boxes, one per lane;
// each of its RANK_WARPS warps counts over a slice of all N scores (count_above_in_slice)
// and the slices' counts are summed in shared memory. O(N^2) comparisons, spread over
// N * 32 threads, and the NMS that follows is O(N^2) anyway.

// sorted_scores and sorted_labels may be null (not needed / no labels); so may
// verdict_host: where it is not, a bad row (run_nms's value rules) sets it to 1
// (row_is_bad, report_bad_row in _common.cuh), so that no separate check need run.
template <typename T>
__global__ void rank_by_score_kernel(const T* boxes, const T* scores, const long long* labels, int n,
                                     long long* order, T* sorted_boxes, T* sorted_scores,
                                     long long* sorted_labels, long long* verdict_host) {
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
    if (verdict_host != nullptr && row_is_bad(boxes, scores, j)) report_bad_row(verdict_host);
}

// Ranking by merging, for large N: O(N log N) work in three launches instead of O(N^2).
// 1. chunk_sort_kernel sorts each chunk of MERGE_CHUNK boxes by counting in shared memory.
// 2. group_merge_kernel merges each group of chunks (32 KiB of keys) in shared memory: a
//    box's place in its group is its place in its chunk plus, for each other chunk, how
//    many of that chunk's boxes rank above it (a binary search).
// 3. merge_rank_kernel does the same across the groups in global memory (the sorted
//    groups stay in L2) and writes the outputs at each box's rank.
// A box's rank key holds its score key and its index, so all keys differ. The chunks are
// padded to MERGE_CHUNK with keys that rank below every box (score key 0, which no score
// has, and indices >= n), so every search reads only written slots and every padded key
// ends up past rank n - 1.
#define GROUP_BYTES 32768  // one group's keys in group_merge_kernel's shared memory

// Float keys (float32, float16) pack the 32-bit score key over the complemented index in
// one 64-bit integer: one load and one comparison per search step. Double keys need both.
template <typename A> struct RankKey {
    struct type { unsigned long long key; int index; };
    static __device__ __forceinline__ type make(A score, int i) { return {score_key(score), i}; }
    static __device__ __forceinline__ type padding(int i) { return {0ull, i}; }
    static __device__ __forceinline__ bool above(const type& a, const type& b) { return ranks_above(a.key, a.index, b.key, b.index); }
    static __device__ __forceinline__ int index(const type& a) { return a.index; }
};
template <> struct RankKey<float> {
    typedef unsigned long long type;
    static __device__ __forceinline__ type make(float score, int i) { return (score_key(score) << 32) | (0xffffffffu - unsigned(i)); }
    static __device__ __forceinline__ type padding(int i) { return 0xffffffffu - unsigned(i); }
    static __device__ __forceinline__ bool above(type a, type b) { return a > b; }
    static __device__ __forceinline__ int index(type a) { return int(0xffffffffu - unsigned(a & 0xffffffffu)); }
};

// How many of the `length` sorted keys at `sorted` rank above `key` (length a power of two
// up to 2 * step0, or less: probes past `length` count as not above).
template <typename R, typename K>
__device__ __forceinline__ int count_above_sorted(const K* sorted, int length, int step0, const K& key) {
    int at = 0;
    for (int step = step0; step >= 1; step /= 2) {
        const int probe = at + step - 1;
        if (probe < length && R::above(sorted[probe], key)) at += step;
    }
    return at + (at < length && R::above(sorted[at], key) ? 1 : 0);
}

template <typename T>
__global__ void __launch_bounds__(MERGE_CHUNK) chunk_sort_kernel(const T* scores, int n,
                                                                 typename RankKey<typename Arith<T>::type>::type* chunk_sorted) {
    typedef RankKey<typename Arith<T>::type> R;
    typedef typename R::type K;
    __shared__ K keys[MERGE_CHUNK];
    const int i = blockIdx.x * MERGE_CHUNK + threadIdx.x;
    const K mine = i < n ? R::make(load_value(scores, i), i) : R::padding(i);
    keys[threadIdx.x] = mine;
    __syncthreads();
    int above = 0;
#pragma unroll 8
    for (int k = 0; k < MERGE_CHUNK; ++k) above += R::above(keys[k], mine);
    chunk_sorted[blockIdx.x * MERGE_CHUNK + above] = mine;
}

// A block per chunk: it loads its group's sorted chunks into shared memory and places its
// own chunk's keys in the group. slots = chunks * MERGE_CHUNK.
template <typename T>
__global__ void __launch_bounds__(MERGE_CHUNK) group_merge_kernel(int slots,
                                                                  const typename RankKey<typename Arith<T>::type>::type* chunk_sorted,
                                                                  typename RankKey<typename Arith<T>::type>::type* group_sorted) {
    typedef RankKey<typename Arith<T>::type> R;
    typedef typename R::type K;
    constexpr int GROUP = GROUP_BYTES / sizeof(K);  // keys in a group (a multiple of MERGE_CHUNK)
    __shared__ K group[GROUP];
    const int chunk = blockIdx.x, first = chunk * MERGE_CHUNK / GROUP * GROUP;
    const int length = min(GROUP, slots - first);
    for (int k = threadIdx.x; k < length; k += MERGE_CHUNK) group[k] = chunk_sorted[first + k];
    __syncthreads();
    const int own = chunk * MERGE_CHUNK - first;
    const K mine = group[own + threadIdx.x];
    int place = threadIdx.x;  // its place in its own sorted chunk
    for (int other = 0; other < length; other += MERGE_CHUNK)
        if (other != own) place += count_above_sorted<R>(group + other, MERGE_CHUNK, MERGE_CHUNK / 2, mine);
    group_sorted[first + place] = mine;
}

// A thread per slot of the sorted groups: its rank is its place in its group plus, for
// each other group, how many there rank above it; then the outputs at that rank.
// sorted_scores and sorted_labels may be null, as in rank_by_score_kernel.
template <typename T>
__global__ void __launch_bounds__(MERGE_CHUNK) merge_rank_kernel(const T* boxes, const T* scores, const long long* labels,
                                                                 int n, int slots,
                                                                 const typename RankKey<typename Arith<T>::type>::type* group_sorted,
                                                                 long long* order, T* sorted_boxes, T* sorted_scores,
                                                                 long long* sorted_labels, long long* verdict_host) {
    typedef RankKey<typename Arith<T>::type> R;
    typedef typename R::type K;
    constexpr int GROUP = GROUP_BYTES / sizeof(K);
    const int slot = blockIdx.x * MERGE_CHUNK + threadIdx.x;
    if (slot >= slots) return;
    const K mine = group_sorted[slot];
    const int own = slot / GROUP * GROUP;
    int rank = slot - own;
    constexpr int TOGETHER = 4;  // searches in flight per thread
    for (int g0 = 0; g0 < slots; g0 += TOGETHER * GROUP) {
        int at[TOGETHER], length[TOGETHER];
#pragma unroll
        for (int u = 0; u < TOGETHER; ++u) {
            const int first = g0 + u * GROUP;
            length[u] = first == own ? 0 : max(0, min(GROUP, slots - first));
            at[u] = 0;
        }
#pragma unroll
        for (int step = GROUP / 2; step >= 1; step /= 2) {
#pragma unroll
            for (int u = 0; u < TOGETHER; ++u) {
                const int probe = at[u] + step - 1;
                if (probe < length[u] && R::above(group_sorted[g0 + u * GROUP + probe], mine)) at[u] += step;
            }
        }
#pragma unroll
        for (int u = 0; u < TOGETHER; ++u)
            rank += at[u] + (at[u] < length[u] && R::above(group_sorted[g0 + u * GROUP + at[u]], mine) ? 1 : 0);
    }
    const int j = R::index(mine);
    if (j >= n) return;  // padding (its rank is past n - 1)
    order[rank] = j;
    for (int c = 0; c < 4; ++c) sorted_boxes[4LL * rank + c] = boxes[4LL * j + c];
    if (sorted_scores != nullptr) sorted_scores[rank] = scores[j];
    if (labels != nullptr) sorted_labels[rank] = labels[j];
    if (verdict_host != nullptr && row_is_bad(boxes, scores, j)) report_bad_row(verdict_host);
}
