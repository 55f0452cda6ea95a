// hard_fused.cu's block resolve in rounds (resolve_in_rounds), of block_resolve_kernel
// and streamed_resolve_kernel, included by it after the helpers it uses (finish,
// write_kept, ...); CudaModule.source puts this text in place of the #include.

// Resolve for words > 32: one block, in rounds of ROUND_WORDS words (ROUND_BOXES boxes).
// The "removed" bitmap is in shared memory. Warp 0 decides the round's words one after
// another; lane k holds box k of the word, and a kept box's effect on the round's later
// words is a warp OR (no barrier). The rest of the block works a round ahead and a round
// behind it, so the deciding warp never waits for global memory: while round r is
// decided, the other warps copy round r + 1's mask rows (at its own words and the next
// round's) and input indices into shared memory, and OR round r - 1's kept rows into the
// bitmap past round r. Round r - 1's effect on round r itself is ORed by the deciding
// warp from the staged rows when round r - 1 ends (the staged rows reach one round
// further for that). One __syncthreads() per round. The deciding warp's chain is the
// resolve's time, so inside the round it only decides; the kept boxes' indices, the list
// of kept rows and their bits at the next round wait for the round's end (a clock64 trace
// of the design before, which ORed and prefetched between two barriers, showed the OR and
// the prefetch's issue on that chain; results/PERFLOG.md).
#define ROUND_BOXES (32 * ROUND_WORDS)
#define STAGE_WORDS (2 * ROUND_WORDS)  // a staged row: the round's words, then the next round's
#define STAGE_STRIDE (STAGE_WORDS + 1)  // odd: a warp reading one word of 32 rows hits 32 banks
// The other warps work beside the deciding warp 0, but not those that share its scheduler
// (warps 4, 8, 12: warp i issues from scheduler i % 4), whose instructions took issue
// slots from its chain.
#define HELPER_THREADS (RESOLVE_THREADS / 4 * 3)

// The block resolve reads the mask from L2 (__ldcg): each word is read once, and in the
// streamed resolve other blocks write it during the launch (an L1 line of a whole row can
// hold the first words of the next row, not yet written).
// Round `round`'s staged rows (words round * ROUND_WORDS ... + STAGE_WORDS) and input
// indices, copied by THREADS threads (t: this one's place) in two steps: load's loads
// are all in flight before its caller does anything else (the other warps OR the last
// round's kept rows meanwhile: their loads and these then share one memory latency,
// which at N = 32768 comes from HBM), and store puts them into shared memory. Row
// words before the row's own word were never written by the mask kernel, so they are
// not read: they and everything past n or past the last word are staged as 0.
template <int THREADS>
struct StagedRound {
    static constexpr int values = ROUND_BOXES * STAGE_WORDS, unroll = (values + THREADS - 1) / THREADS;
    static constexpr int index_unroll = (ROUND_BOXES + THREADS - 1) / THREADS;
    unsigned int value[unroll];
    long long index[index_unroll];

    __device__ __forceinline__ void load(const unsigned int* mask, const long long* order, int n, int words, int round,
                                         int t) {
        const int first_row = round * ROUND_BOXES, first_word = round * ROUND_WORDS;
#pragma unroll
        for (int u = 0; u < unroll; ++u) {
            const int v = t + u * THREADS;  // consecutive threads, consecutive words of a row
            const int i = v / STAGE_WORDS, c = v % STAGE_WORDS, row = first_row + i, word = first_word + c;
            value[u] = v < values && row < n && word < words && c >= i / 32 ? __ldcg(mask + (long long)row * words + word) : 0u;
        }
#pragma unroll
        for (int u = 0; u < index_unroll; ++u) {
            const int i = t + u * THREADS;
            index[u] = i < ROUND_BOXES && first_row + i < n ? order[first_row + i] : 0;
        }
    }

    __device__ __forceinline__ void store(unsigned int* rows, long long* indices, int t) const {
#pragma unroll
        for (int u = 0; u < unroll; ++u) {
            const int v = t + u * THREADS;
            if (v < values) rows[(v / STAGE_WORDS) * STAGE_STRIDE + v % STAGE_WORDS] = value[u];
        }
#pragma unroll
        for (int u = 0; u < index_unroll; ++u) {
            const int i = t + u * THREADS;
            if (i < ROUND_BOXES) indices[i] = index[u];
        }
    }
};

// OR the m rows kept_rows[0, m) into removed[w] for words w in [past, words), by THREADS
// threads (t: this one's place; whole warps). One thread per word, 32 loads in flight;
// with many kept rows and fewer words left than half the threads, `group` threads per
// word (a power of two within a warp) each take every group-th row, 16 predicated loads
// in flight, and OR by shuffles: ~m / (16 group) memory latencies in a row instead of
// ~m / 32 (with few kept rows the plain loop is as fast).
template <int THREADS>
__device__ __forceinline__ void or_kept_rows(const unsigned int* mask, int words, const int* kept_rows, int m, int past,
                                             unsigned int* removed, int t) {
    const int helpers = THREADS, left = words - past;
    if (m == 0 || left <= 0) return;  // uniform over the helpers
    if (m >= 32 && 2 * left <= helpers) {
        int group = 2;
        while (group < 32 && 2 * group * left <= helpers) group *= 2;
        const int sub = t % group, w = past + t / group;  // one pass: group * left <= helpers
        unsigned int bits = 0u;
        if (w < words) {
            for (int s = sub; s < m; s += 16 * group) {
#pragma unroll
                for (int u = 0; u < 16; ++u) {  // predicated, independent: all in flight
                    const int k = s + u * group;
                    if (k < m) bits |= __ldcg(mask + (long long)kept_rows[k] * words + w);
                }
            }
        }
        // t - lane is a multiple of 32, so a group never straddles a warp
        for (int offset = group / 2; offset > 0; offset /= 2) bits |= __shfl_xor_sync(0xffffffffu, bits, offset);
        if (w < words && sub == 0) removed[w] |= bits;
    } else {
        for (int w = past + t; w < words; w += helpers) {
            unsigned int bits = 0u;
            int k = 0;
            for (; k + 32 <= m; k += 32) {  // 32 independent loads in flight
#pragma unroll
                for (int u = 0; u < 32; ++u) bits |= __ldcg(mask + (long long)kept_rows[k + u] * words + w);
            }
            for (; k < m; ++k) bits |= __ldcg(mask + (long long)kept_rows[k] * words + w);
            removed[w] |= bits;
        }
    }
}

// Dynamic shared memory (block_resolve_shared_bytes in cuda.py): input indices
// [2][ROUND_BOXES] (long long), staged rows [2][ROUND_BOXES][STAGE_STRIDE], kept rows
// [2][ROUND_BOXES] (int), then the bitmap [words]; two of each by round parity.
// The streamed resolve's producers finish the mask by row words, in order; before a warp
// of the resolving block stages a round's rows it makes sure the round's row words are
// whole: lane k reads row_done[first_word + k] with an acquire load until the row words
// from first_word on are whole for the round (each counts `groups` tasks less those left
// of the diagonal, STREAM_WARPS column words a task). The producers are mostly far ahead,
// so one look covers up to 32 row words, four rounds: the warp keeps how far the mask is
// known whole (`whole_to`) and looks again only past it. The acquire loads and the warp's
// __syncwarp order its later mask loads after the producers' writes, which they released
// with their count.
#define STREAM_WARPS (RESOLVE_THREADS / 32)  // column words per mask task of the streamed resolve
__device__ __forceinline__ void wait_for_row_words(const unsigned int* row_done, int first_word, int words,
                                                   int& whole_to) {
    const int needed = min(first_word + ROUND_WORDS, words);
    if (whole_to >= needed) return;  // warp-uniform
    const int lane = threadIdx.x % 32, word = first_word + lane;
    const unsigned int tasks = word < words ? (words + STREAM_WARPS - 1) / STREAM_WARPS - word / STREAM_WARPS : 0u;
    while (true) {
        const bool whole = word >= words || load_acquire(row_done + word) >= tasks;
        const unsigned int missing = ~__ballot_sync(0xffffffffu, whole);
        const int run = missing == 0u ? 32 : __ffs(missing) - 1;  // whole row words from first_word on
        if (first_word + run >= needed) {
            whole_to = min(first_word + run, words);
            break;
        }
        __nanosleep(32);
    }
    __syncwarp();
}

// The block resolve (one block of RESOLVE_THREADS), from the mask in global memory; with
// row_done (the streamed resolve), each round's rows are waited for before they are
// staged (wait_for_row_words), and row_done is zeroed once every row word was whole.
__device__ __forceinline__ void resolve_in_rounds(const unsigned int* mask, const long long* order, int n, int words,
                                                  unsigned int* row_done, long long* keep, long long* count_out,
                                                  long long* host_count) {
    extern __shared__ __align__(16) unsigned char resolve_shared[];
    long long* staged_index = reinterpret_cast<long long*>(resolve_shared);
    unsigned int* staged_rows = reinterpret_cast<unsigned int*>(staged_index + 2 * ROUND_BOXES);
    int* kept_rows = reinterpret_cast<int*>(staged_rows + 2 * ROUND_BOXES * STAGE_STRIDE);
    unsigned int* removed = reinterpret_cast<unsigned int*>(kept_rows + 2 * ROUND_BOXES);
    __shared__ int kept_in_round[2], kept_total;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    for (int w = tid; w < words; w += blockDim.x) removed[w] = 0u;
    if (tid == 0) kept_in_round[1] = 0;  // "round -1" kept nothing
    int whole_to = 0;  // this warp's: row words known whole (the streamed resolve)
    {
        if (row_done != nullptr) wait_for_row_words(row_done, 0, words, whole_to);
        StagedRound<RESOLVE_THREADS> first_round;
        first_round.load(mask, order, n, words, 0, tid);
        first_round.store(staged_rows, staged_index, tid);
    }
    __syncthreads();
    int count = 0;               // the deciding warp's: boxes kept so far
    unsigned int from_last = 0u;  // the deciding warp's: lane h, round r - 1's kept rows at round r's word h
    for (int round = 0, first = 0; first < words; ++round, first += ROUND_WORDS) {
        const int parity = round & 1;
        const unsigned int* rows = staged_rows + parity * ROUND_BOXES * STAGE_STRIDE;
        int* kept_now = kept_rows + parity * ROUND_BOXES;
        if (tid < 32) {
            unsigned int own[ROUND_WORDS][ROUND_WORDS];  // [g][h], h >= g: word g's lane box's row at word h
#pragma unroll
            for (int g = 0; g < ROUND_WORDS; ++g)
#pragma unroll
                for (int h = g; h < ROUND_WORDS; ++h) own[g][h] = rows[(g * 32 + lane) * STAGE_STRIDE + h];
            unsigned int carry[ROUND_WORDS], kept_word[ROUND_WORDS];
#pragma unroll
            for (int h = 0; h < ROUND_WORDS; ++h) {
                carry[h] = (first + h < words ? removed[first + h] : 0u) | __shfl_sync(0xffffffffu, from_last, h);
                kept_word[h] = 0u;
            }
            // The deciding chain: word after word, nothing else in it (what it does not
            // need waits for the round's end: a shared-memory load on its way stalls it).
#pragma unroll
            for (int g = 0; g < ROUND_WORDS; ++g) {
                const int word = first + g;
                if (word < words) {  // the same in every lane
                    const unsigned int kept = decide_word(~carry[g] & valid_bits(n, word), own[g][g]);
                    kept_word[g] = kept;
                    if (kept != 0u) {  // the same in every lane
                        const bool mine = kept & (1u << lane);
#pragma unroll
                        for (int h = g + 1; h < ROUND_WORDS; ++h) carry[h] |= warp_or(mine ? own[g][h] : 0u);
                    }
                }
            }
            // The round's end, from the list of its kept rows (clustered scenes keep ~20
            // boxes a round): the list in kept_now (the other warps OR it next round),
            // the kept boxes' input indices to keep, and their rows' bits at the next
            // round's words into from_last (lane h % 8 ORs word h of every 4th kept row).
            int in_round = 0;
#pragma unroll
            for (int g = 0; g < ROUND_WORDS; ++g) {
                if ((kept_word[g] >> lane) & 1u)
                    kept_now[in_round + __popc(kept_word[g] & ((1u << lane) - 1u))] = (first + g) * 32 + lane;
                in_round += __popc(kept_word[g]);
            }
            __syncwarp();
            for (int k = lane; k < in_round; k += 32)
                keep[count + k] = staged_index[parity * ROUND_BOXES + kept_now[k] - first * 32];
            count += in_round;
            unsigned int next = 0u;
            for (int k = lane / ROUND_WORDS; k < in_round; k += 32 / ROUND_WORDS)
                next |= rows[(kept_now[k] - first * 32) * STAGE_STRIDE + ROUND_WORDS + lane % ROUND_WORDS];
            for (int offset = ROUND_WORDS; offset < 32; offset *= 2) next |= __shfl_xor_sync(0xffffffffu, next, offset);
            from_last = next;  // lane h (and h + 8, ...): the next round's word h
            if (lane == 0) kept_in_round[parity] = in_round;
        } else if (warp % 4 != 0) {  // not on the deciding warp's scheduler (warp i runs on scheduler i % 4)
            const int helper = (warp - 1 - warp / 4) * 32 + lane;  // 0 ... HELPER_THREADS - 1
            const bool stage = first + ROUND_WORDS < words;  // block-uniform
            StagedRound<HELPER_THREADS> next_round;
            if (stage && row_done != nullptr) wait_for_row_words(row_done, first + ROUND_WORDS, words, whole_to);
            if (stage) next_round.load(mask, order, n, words, round + 1, helper);
            or_kept_rows<HELPER_THREADS>(mask, words, kept_rows + (1 - parity) * ROUND_BOXES, kept_in_round[1 - parity],
                                         first + ROUND_WORDS, removed, helper);
            if (stage)
                next_round.store(staged_rows + (1 - parity) * ROUND_BOXES * STAGE_STRIDE,
                                 staged_index + (1 - parity) * ROUND_BOXES, helper);
        }
        __syncthreads();  // round decided, round + 1 staged, the bitmap past it up to date with round - 1
    }
    if (tid == 0) kept_total = count;
    if (row_done != nullptr)  // every row word was waited for whole: no producer counts again
        for (int w = tid; w < words; w += blockDim.x) row_done[w] = 0u;
    __syncthreads();
    finish(kept_total, n, keep, count_out, host_count);
}
