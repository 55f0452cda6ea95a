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
