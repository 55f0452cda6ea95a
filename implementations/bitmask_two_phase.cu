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

// Phase 2: one block walks the boxes in rank order (the seed's design), a word of 32
// boxes per step. The "removed" bitmap lives in shared memory. Warp 0 decides the word:
// lane k holds row (word * 32 + k)'s bits inside the word (the mask's diagonal word,
// prefetched one step ahead), and the warp walks only the boxes still alive, taking
// each kept box's bits by shuffle, all in registers. After a __syncthreads() the whole
// block ORs the kept boxes' rows into the bitmap past the word, and a second one makes
// that visible to the next step. Writes the kept boxes' input indices (order[i]) in rank
// order, and their count in keep[n].
extern "C" __global__ void greedy_resolve_kernel(const unsigned int* mask, const long long* order, int n,
                                                 int words, long long* keep) {
    extern __shared__ unsigned int removed[];
    __shared__ unsigned int kept_in_word;
    for (int w = threadIdx.x; w < words; w += blockDim.x) removed[w] = 0u;
    const int lane = threadIdx.x % 32;
    const bool decider = threadIdx.x < 32;  // warp 0
    int count = 0;                          // kept so far (in warp 0, the same in every lane)
    unsigned int diagonal = decider && lane < n ? mask[(long long)lane * words] : 0u;
    __syncthreads();
    for (int word = 0; word < words; ++word) {
        if (decider) {
            const int valid = min(32, n - word * 32);
            unsigned int alive = ~removed[word] & (valid == 32 ? 0xffffffffu : (1u << valid) - 1u);
            const unsigned int own_row = diagonal;
            const int next = (word + 1) * 32 + lane;
            if (next < n) diagonal = mask[(long long)next * words + word + 1];
            unsigned int kept = 0u;
            while (alive != 0u) {  // the same in every lane: no divergence
                const int b = __ffs(alive) - 1;
                kept |= 1u << b;
                alive &= ~(1u << b) & ~__shfl_sync(0xffffffffu, own_row, b);
            }
            if (kept & (1u << lane)) keep[count + __popc(kept & ((1u << lane) - 1u))] = order[word * 32 + lane];
            count += __popc(kept);
            if (lane == 0) kept_in_word = kept;
        }
        __syncthreads();  // the word's decision before anyone uses it
        const unsigned int kept = kept_in_word;
        for (int w = word + 1 + threadIdx.x; w < words; w += blockDim.x) {
            unsigned int bits = 0u;
            for (unsigned int k = kept; k != 0u; k &= k - 1u) bits |= mask[(long long)(word * 32 + __ffs(k) - 1) * words + w];
            removed[w] |= bits;
        }
        __syncthreads();  // the bitmap complete before the next word is decided
    }
    if (threadIdx.x == 0) keep[n] = count;
}
