// Ranking by score on the device, shared by every CUDA backend: one launch instead of
// torch.sort + index_select + a labels gather (each a launch and ~15-45 us of host time).
//
// Thread j counts the boxes that rank above it (ranks_above in _common.cuh: a strict total
// order), so the ranks are a permutation and every output slot is written exactly once.
// O(N^2) comparisons from shared memory: at N = 8192 a few microseconds of GPU time,
// cheaper than the sort it replaces, and the NMS that follows is O(N^2) anyway.
#define RANK_THREADS 128

// sorted_scores and sorted_labels may be null (not needed / no labels).
template <typename T>
__global__ void rank_by_score_kernel(const T* boxes, const T* scores, const long long* labels, int n,
                                     long long* order, T* sorted_boxes, T* sorted_scores,
                                     long long* sorted_labels) {
    typedef typename Arith<T>::type A;
    __shared__ A chunk[RANK_THREADS];
    const int j = blockIdx.x * RANK_THREADS + threadIdx.x;
    const A score_j = j < n ? A(load_value(scores, j)) : A(0);
    int rank = 0;
    for (int base = 0; base < n; base += RANK_THREADS) {
        __syncthreads();  // the previous chunk is read by everyone before it is replaced
        if (base + threadIdx.x < n) chunk[threadIdx.x] = load_value(scores, base + threadIdx.x);
        __syncthreads();
        const int count = min(RANK_THREADS, n - base);
        if (j < n) {
            for (int k = 0; k < count; ++k) rank += ranks_above(chunk[k], base + k, score_j, j);
        }
    }
    if (j >= n) return;
    order[rank] = j;
    for (int c = 0; c < 4; ++c) sorted_boxes[4LL * rank + c] = boxes[4LL * j + c];
    if (sorted_scores != nullptr) sorted_scores[rank] = scores[j];
    if (labels != nullptr) sorted_labels[rank] = labels[j];
}
