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

// Phase 2: one block walks the boxes in rank order. The "removed" bitmap lives in shared
// memory; a kept box ORs its mask row into it and __syncthreads() makes that visible
// before the next decision (the seed's design). Thread t owns words t, t + blockDim, ...
// of every row; it loads its words of row i + 1 while box i is decided, so the wait for
// global memory overlaps the barrier instead of adding to it. Every thread also holds the
// word of the current box (identical in all threads) in a register, so no thread reads a
// shared word that another one is writing. Writes the kept boxes' input indices
// (order[i]) in rank order, and their count.
#define MAX_WORDS_PER_THREAD 12  // 12 x 1024 threads x 32 bits: N <= 393216 (48 KiB of removed bits)

extern "C" __global__ void greedy_resolve_kernel(const unsigned int* mask, const long long* order, int n,
                                                 int words, long long* keep, int* kept_count) {
    extern __shared__ unsigned int removed[];
    const int t = threadIdx.x, stride = blockDim.x;
    for (int w = t; w < words; w += stride) removed[w] = 0u;
    unsigned int next_own[MAX_WORDS_PER_THREAD], next_diagonal;  // row i + 1, loaded early
    auto load_row = [&](int i) {
        const unsigned int* row = mask + (long long)i * words;
        next_diagonal = row[i / 32];
#pragma unroll
        for (int k = 0; k < MAX_WORDS_PER_THREAD; ++k) {
            const int w = t + k * stride;
            next_own[k] = w < words && w > i / 32 ? row[w] : 0u;
        }
    };
    load_row(0);
    __syncthreads();
    int count = 0;
    unsigned int current = 0u;  // removed[i / 32]
    for (int i = 0; i < n; ++i) {
        unsigned int own[MAX_WORDS_PER_THREAD];
#pragma unroll
        for (int k = 0; k < MAX_WORDS_PER_THREAD; ++k) own[k] = next_own[k];
        const unsigned int diagonal = next_diagonal;
        if (i + 1 < n) load_row(i + 1);
        const int word = i / 32;
        if (i % 32 == 0) current = removed[word];  // its last writer passed a barrier since
        if (current & (1u << (i % 32))) continue;  // the same in every thread: no divergence
        if (t == 0) keep[count] = order[i];
        ++count;
        current |= diagonal;
#pragma unroll
        for (int k = 0; k < MAX_WORDS_PER_THREAD; ++k) {
            const int w = t + k * stride;
            if (w < words && w > word) removed[w] |= own[k];
        }
        __syncthreads();
    }
    if (t == 0) *kept_count = count;
}
