// Two-phase bitmask NMS (seeds/two-phase-bitmask-nms.zh.txt). Boxes arrive sorted by rank.

// Phase 1: one warp per box i. For each 32-box word from the one holding box i + 1
// (aligned down to 32), lane k votes whether i suppresses box word * 32 + k and
// __ballot_sync packs the 32 votes into one word. Lanes for boxes at or before i (or past
// n) vote 0, so bit k of word w means box w * 32 + k in every row, as phase 2 reads it.
// The block's BALLOT_WARPS boxes share their candidates: the block stages them through
// shared memory, 32 * BALLOT_WARPS at a time (one global load per thread and chunk).
#define BALLOT_WARPS 8

template <typename T>
__global__ void ballot_mask_kernel(const T* boxes, const long long* labels, int n, int words,
                                   double iou_threshold, unsigned int* mask) {
    typedef typename Arith<T>::type A;
    __shared__ Box<A> chunk_boxes[32 * BALLOT_WARPS];
    __shared__ long long chunk_labels[32 * BALLOT_WARPS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int first_box = blockIdx.x * BALLOT_WARPS, i = first_box + warp;
    const bool active = i < n;  // the same for all 32 lanes: whole warps
    const Box<A> box_i = active ? load_box(boxes, i) : Box<A>{0, 0, 0, 0};
    const long long label_i = active && labels != nullptr ? labels[i] : 0;
    const int first_word = (i + 1) / 32;
    for (int chunk = first_box / 32 * 32; chunk < n; chunk += 32 * BALLOT_WARPS) {
        __syncthreads();  // the previous chunk is used up before it is replaced
        const int t = chunk + threadIdx.x;
        if (t < n) {
            chunk_boxes[threadIdx.x] = load_box(boxes, t);
            if (labels != nullptr) chunk_labels[threadIdx.x] = labels[t];
        }
        __syncthreads();
        if (!active) continue;
        for (int w = 0; w < BALLOT_WARPS; ++w) {
            const int word = chunk / 32 + w;
            if (word >= words) break;
            if (word < first_word) continue;
            const int j = word * 32 + lane, slot = w * 32 + lane;
            const bool vote = j > i && j < n && (labels == nullptr || chunk_labels[slot] == label_i) &&
                              overlaps(box_i, chunk_boxes[slot], iou_threshold);
            const unsigned int bits = __ballot_sync(0xffffffffu, vote);
            if (lane == 0) mask[(long long)i * words + word] = bits;
        }
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
