// Two-phase bitmask NMS (seeds/two-phase-bitmask-nms.zh.txt). Boxes arrive sorted by rank.

// Phase 1: one warp per box i. For each 32-box word from the one holding box i + 1
// (aligned down to 32), lane k votes whether i suppresses box word * 32 + k and
// __ballot_sync packs the 32 votes into one word. Lanes for boxes at or before i (or past
// n) vote 0, so bit k of word w means box w * 32 + k in every row, as phase 2 reads it.
template <typename T>
__global__ void ballot_mask_kernel(const T* boxes, const long long* labels, int n, int words,
                                   double iou_threshold, unsigned int* mask) {
    const int i = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (i >= n) return;  // i is the same for all 32 lanes: whole warps leave together
    const auto box_i = load_box(boxes, i);
    for (int word = (i + 1) / 32; word < words; ++word) {
        const int j = word * 32 + lane;
        const bool vote = j > i && j < n && same_label(labels, i, j) && overlaps(box_i, load_box(boxes, j), iou_threshold);
        const unsigned int bits = __ballot_sync(0xffffffffu, vote);
        if (lane == 0) mask[(long long)i * words + word] = bits;
    }
}

// Phase 2: one block walks the boxes in rank order (the seed's design). The "removed"
// bitmap lives in shared memory; a kept box ORs its mask row into it and __syncthreads()
// makes that visible before the next decision, so only kept boxes cost a barrier. Every
// thread holds the word of the current box in a register (identical in all threads), so
// no thread reads a shared word that another one is writing. Writes the kept boxes'
// input indices (order[i]) in rank order, and their count in keep[n].
extern "C" __global__ void greedy_resolve_kernel(const unsigned int* mask, const long long* order, int n,
                                                 int words, long long* keep) {
    extern __shared__ unsigned int removed[];
    for (int w = threadIdx.x; w < words; w += blockDim.x) removed[w] = 0u;
    __syncthreads();
    int count = 0;
    unsigned int current = 0u;  // removed[i / 32]
    for (int i = 0; i < n; ++i) {
        const int word = i / 32;
        if (i % 32 == 0) current = removed[word];  // its last writer passed a barrier since
        if (current & (1u << (i % 32))) continue;  // the same in every thread: no divergence
        if (threadIdx.x == 0) keep[count] = order[i];
        ++count;
        const unsigned int* row = mask + (long long)i * words;
        current |= row[word];
        for (int w = word + 1 + threadIdx.x; w < words; w += blockDim.x) removed[w] |= row[w];
        __syncthreads();
    }
    if (threadIdx.x == 0) keep[n] = count;
}
