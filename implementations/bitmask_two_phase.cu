// Two-phase bitmask NMS (seeds/two-phase-bitmask-nms.zh.txt). Boxes arrive sorted by rank.

// Phase 1: the seed's ballot mask, a warp per box and __ballot_sync per 32-box word:
// _common.cuh's ballot_mask_kernel (shared with hard_fused). It writes row i from word
// i / 32 on; the seed starts at (i + 1) / 32, which differs only for the last box of a
// word, whose row is 0 in that word either way. Phase 2 reads only written words.

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
