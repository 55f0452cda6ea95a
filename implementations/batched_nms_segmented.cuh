// batched_nms.cu's class-segmented path, for float scores and at most fast_max candidates:
// select_nms (no sort; every class of at most SELECT_MAX candidates), else segmented_nms
// (sorted). Included by batched_nms.cu after the helpers it uses (carve, write_detection,
// pad_detections); CudaModule.source puts this text in place of the #include.

// block_sort by counting, for count <= COUNT_SORT_MAX entries: NMS_THREADS / p threads (a
// power of two, lanes of one warp) share an entry and count, each over every share-th of
// the entries, those that go before it (larger key, on equal keys larger tie, on equal
// both the lower entry); a shuffle adds their counts and the first puts the entry there.
// Thread t then takes the t-th, and threads from count to p the padding (0, 0, ~0). The
// network below is a chain of log^2 p dependent exchanges on the candidates' few warps,
// which at a usual image's hundred candidates took longer than all the block's threads
// counting side by side; the counts grow as count^2, so many candidates take the network.
__device__ void block_count_sort(unsigned long long& key, unsigned int& tie, unsigned int& val, int count, int p,
                                 unsigned long long* x_key, unsigned int* x_tie, unsigned int* x_val) {
    const int t = threadIdx.x;
    if (t < count) {
        x_key[t] = key;
        x_tie[t] = tie;
        x_val[t] = val;
    }
    __syncthreads();
    const int share = NMS_THREADS / p, entry = t / share;
    int before = 0;
    if (entry < count) {
        const unsigned long long mine = x_key[entry];
        const unsigned int mine_tie = x_tie[entry];
#pragma unroll 4  // the shared loads of several entries in flight at once
        for (int j = t % share; j < count; j += share) {
            const unsigned long long other = x_key[j];
            const unsigned int other_tie = x_tie[j];
            before += other > mine || (other == mine && (other_tie > mine_tie || (other_tie == mine_tie && j < entry)));
        }
    }
    for (int d = share / 2; d > 0; d >>= 1) before += __shfl_xor_sync(0xffffffffu, before, d);  // whole warps
    if (entry < count && t % share == 0) {  // a region the counting above does not read
        x_key[p + before] = x_key[entry];
        x_tie[p + before] = x_tie[entry];
        x_val[p + before] = x_val[entry];
    }
    __syncthreads();
    if (t < count) {
        key = x_key[p + t];
        tie = x_tie[p + t];
        val = x_val[p + t];
    } else if (t < p) {
        key = 0ull;
        tie = 0u;
        val = 0xffffffffu;
    }
    __syncthreads();  // x_* are free for the caller
}

// Sorts the entries (key, tie, val) of the block's first p threads (p a power of two,
// 32 <= p <= NMS_THREADS), one a thread, so that thread t ends with the t-th: larger key
// first, on equal keys larger tie first (entries with equal key and tie stay in some order).
// The first `count` are the entries, the rest padding (0, 0, ~0), which sorts last. Up to
// COUNT_SORT_MAX entries by counting (block_count_sort), more by merging: each warp sorts
// its 32 entries by a bitonic network of shuffles, then each round merges pairs of sorted
// runs, an entry going to its place in its own run plus the number of the other run's
// entries that go before it (a binary search; on equal key and tie the lower run's go
// first), through the two buffers of p entries (x_*) in turn, one barrier a round. (A
// bitonic network over the whole block took log p rounds more, each through shared memory.)
// Every thread of the block calls it; it ends with a barrier.
__device__ void block_sort(unsigned long long& key, unsigned int& tie, unsigned int& val, int count, int p,
                           unsigned long long* x_key, unsigned int* x_tie, unsigned int* x_val) {
    if (count <= COUNT_SORT_MAX) {  // uniform over the block
        block_count_sort(key, tie, val, count, p, x_key, x_tie, x_val);
        return;
    }
    const int t = threadIdx.x, lane = t % 32;
    const bool active = t < p;  // whole warps
    if (active) {  // each warp's run, larger first (lane & 32 is 0: one direction at k = 32)
        for (int k = 2; k <= 32; k <<= 1) {
            for (int j = k >> 1; j > 0; j >>= 1) {
                const unsigned long long other_key = __shfl_xor_sync(0xffffffffu, key, j);
                const unsigned int other_tie = __shfl_xor_sync(0xffffffffu, tie, j);
                const unsigned int other_val = __shfl_xor_sync(0xffffffffu, val, j);
                // the lower of the pair keeps the entry that ranks first where bit k of the
                // lane is clear (so the whole run ends in rank order), the other one elsewhere;
                // of two equal entries the lower lane's ranks first (each lane keeps its own)
                const bool keep_first = ((lane & k) == 0) == ((lane & j) == 0);
                const bool other_first = other_key > key || (other_key == key && (other_tie > tie ||
                                                                                  (other_tie == tie && (lane & j))));
                if (other_first == keep_first) {
                    key = other_key;
                    tie = other_tie;
                    val = other_val;
                }
            }
        }
        x_key[t] = key;
        x_tie[t] = tie;
        x_val[t] = val;
    }
    __syncthreads();
    int from = 0;  // the buffer that holds the runs
    for (int width = 32; width < p; width <<= 1) {
        if (active) {
            const unsigned long long* run_key = x_key + from * p;
            const unsigned int* run_tie = x_tie + from * p;
            key = run_key[t];
            tie = run_tie[t];
            val = x_val[from * p + t];
            const int run = t / width, other = (run ^ 1) * width;
            const bool upper = run & 1;  // on equal key and tie, the other run's entries go first
            int lo = 0, hi = width;  // the other run's entries that go before this one: a prefix
            while (lo < hi) {
                const int mid = (lo + hi) / 2;
                const unsigned long long k = run_key[other + mid];
                const unsigned int i = run_tie[other + mid];
                if (k > key || (k == key && (i > tie || (i == tie && upper)))) lo = mid + 1;
                else hi = mid;
            }
            const int to = (1 - from) * p + (run & ~1) * width + t % width + lo;
            x_key[to] = key;
            x_tie[to] = tie;
            x_val[to] = val;
        }
        from = 1 - from;
        __syncthreads();
    }
    if (active) {
        key = x_key[from * p + t];
        tie = x_tie[from * p + t];
        val = x_val[from * p + t];
    }
    __syncthreads();  // x_* are free for the caller
}

// The keeps written in rank order, at most COUNT_SORT_MAX of them (keys unique, a larger key
// ranking first; each keep's position indexes the by-position boxes, scores, labels and
// candidate indices): NMS_THREADS / q threads share a keep and count the keeps that rank
// before it (one barrier-free pass, where a scan and a block sort took seven barriers for a
// usual image's few keeps), and the first writes it at that rank if it is below `output`.
// Every thread of the block calls it.
template <typename T, typename A>
__device__ __forceinline__ void write_ranked_keeps(int b, int detections, int output, int max_output,
                                                   const unsigned long long* keep_keys,
                                                   const unsigned int* keep_positions, const Box<A>* boxes,
                                                   const A* scores, const int* labels, const int* cands,
                                                   int multi_label, int classes, T* out_boxes, T* out_scores,
                                                   long long* out_classes, long long* out_indices) {
    int q = 32;
    while (q < detections) q <<= 1;
    const int tid = threadIdx.x, share = NMS_THREADS / q, entry = tid / share;
    int before = 0;
    if (entry < detections) {
        const unsigned long long mine = keep_keys[entry];
        for (int j = tid % share; j < detections; j += share) before += keep_keys[j] > mine;
    }
    for (int d = share / 2; d > 0; d >>= 1) before += __shfl_xor_sync(0xffffffffu, before, d);  // whole warps
    if (entry < detections && tid % share == 0 && before < output) {
        const unsigned int position = keep_positions[entry];
        write_detection((long long)b * max_output + before, boxes[position], scores[position],
                        (long long)labels[position], cands[position], multi_label, classes, out_boxes, out_scores,
                        out_classes, out_indices);
    }
}

// Greedy NMS per class of image b's n candidates (n <= fast_max, float scores, no
// pre_nms_top_k cut), the padded outputs written; false (nothing written, block-uniform)
// where a class does not fit 32 bits. The steps, each over the whole block:
//   1. every record read once (key, class, box, score, candidate index: one round trip to
//      memory), staged by slot; the sort by (class, score key, lower candidate index),
//      one run per class, then each position gathers its record from the staging;
//   2. the runs ("segments"): their first and end positions, a slot each from a shared
//      counter (their order is free: each is resolved on its own and the keeps are bits by
//      position); segments above LAZY_MAX candidates also take mask words;
//   3. (only for segments above LAZY_MAX) their suppression masks (row r, word w: bit k
//      set iff r suppresses 32 w + k > r of its segment);
//   4. a warp a segment resolves it, stopping at min(max_per_class, max_output) keeps (a
//      class's later keeps rank below max_output others): up to LAZY_MAX candidates
//      lazily, every lane holding the segment's "removed" words, each keep testing its own
//      row against the live candidates after it (a usual class keeps a few of its tens of
//      candidates: the masks tested every pair), larger ones from their masks (lane l
//      holds removed word l, a ballot finds the next live candidate);
//   5. the keeps sorted by rank (score, then lower index); the first max_output are the
//      detections.
// Shared memory (dynamic, carved in this order; batched_nms.fast_shared_bytes computes the
// same): by position the classes, boxes, areas, scores, candidate indices and labels; by
// segment first, end and mask offset; the keep bits; then one region that holds the mask,
// or the sort's buffers, the keeps staged for the second sort and the records staged by
// slot.
template <typename T>
__device__ bool segmented_nms(int b, int n, int fast_max, const unsigned long long* keys, const int* cands,
                              const long long* cand_classes, const typename Arith<T>::type* cand_boxes,
                              const typename Arith<T>::type* cand_scores, int capacity, int classes, int multi_label,
                              int class_agnostic, double iou_threshold, int max_output, int max_per_class,
                              long long* num_detections, T* out_boxes, T* out_scores, long long* out_classes,
                              long long* out_indices) {
    typedef typename Arith<T>::type A;
    static_assert(LAZY_MAX >= 0 && LAZY_MAX <= 32 * 32, "a lane holds each of a lazy segment's removed words");
    constexpr int MASKED_MAX = NMS_THREADS / (LAZY_MAX + 1);  // segments above LAZY_MAX an image holds at most
    extern __shared__ __align__(16) unsigned char shared[];
    __shared__ unsigned int s_segments, s_masked;  // segments so far; masked ones and their words (packed)
    __shared__ unsigned int s_masked_seg[MASKED_MAX > 0 ? MASKED_MAX : 1], s_masked_off[MASKED_MAX > 0 ? MASKED_MAX : 1];
    unsigned char* at = shared;
    unsigned int* f_group = (unsigned int*)carve(at, 4ull * fast_max);
    Box<A>* f_box = (Box<A>*)carve(at, sizeof(Box<A>) * fast_max);
    A* f_area = (A*)carve(at, sizeof(A) * fast_max);
    A* f_score = (A*)carve(at, sizeof(A) * fast_max);
    int* f_cand = (int*)carve(at, 4ull * fast_max);
    int* f_label = (int*)carve(at, 4ull * fast_max);
    unsigned int* f_seg_first = (unsigned int*)carve(at, 4ull * fast_max);
    unsigned int* f_seg_end = (unsigned int*)carve(at, 4ull * fast_max);
    unsigned int* f_seg_off = (unsigned int*)carve(at, 4ull * fast_max);
    unsigned int* f_keep = (unsigned int*)carve(at, 4ull * (fast_max / 32));
    unsigned char* region = at;
    unsigned int* f_mask = (unsigned int*)region;
    unsigned long long* x_key = (unsigned long long*)region;  // 2 fast_max each
    unsigned int* x_tie = (unsigned int*)(region + 16ull * fast_max);
    unsigned int* x_val = (unsigned int*)(region + 24ull * fast_max);
    unsigned long long* staged_key = (unsigned long long*)(region + 32ull * fast_max);  // fast_max each
    unsigned int* staged_val = (unsigned int*)(region + 40ull * fast_max);
    Box<A>* slot_box = (Box<A>*)(region + 44ull * fast_max);  // by slot, until the gather
    A* slot_score = (A*)(region + 60ull * fast_max);
    int* slot_cand = (int*)(region + 64ull * fast_max);
    int* slot_label = (int*)(region + 68ull * fast_max);

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const long long image = (long long)b * capacity;

    // 1. sort key: the class above the score's order key; tie: the complemented candidate index
    unsigned long long key = 0ull;  // below every candidate's
    unsigned int tie = 0u, val = 0xffffffffu;
    bool wide = false;
    if (tid < n) {
        const long long row = image + tid;
        const unsigned long long record = keys[row];  // score key << 32 | ~candidate
        const long long cls = cand_classes[row];
        const Box<A> box = {cand_boxes[4 * row], cand_boxes[4 * row + 1], cand_boxes[4 * row + 2],
                            cand_boxes[4 * row + 3]};
        slot_box[tid] = box;
        slot_score[tid] = cand_scores[row];
        slot_cand[tid] = cands[row];
        slot_label[tid] = (int)cls;
        wide = cls != (long long)(int)cls;  // the label is written back from 32 bits
        const unsigned int group = class_agnostic ? 0u : (unsigned int)(int)cls;
        key = ((unsigned long long)group << 32) | (record >> 32);
        tie = (unsigned int)record;
        val = tid;
    }
    if (__syncthreads_or(wide)) return false;
    int p = 32;
    while (p < n) p <<= 1;
    block_sort(key, tie, val, n, p, x_key, x_tie, x_val);
    if (tid < n) {  // thread t holds position t from here on
        f_group[tid] = (unsigned int)(key >> 32);
        const Box<A> box = slot_box[val];
        f_box[tid] = box;
        f_area[tid] = box_area(box);
        f_score[tid] = slot_score[val];
        f_cand[tid] = slot_cand[val];
        f_label[tid] = slot_label[val];
    }
    if (tid < fast_max / 32) f_keep[tid] = 0u;
    if (tid == 0) {
        s_segments = 0u;
        s_masked = 0u;
    }
    __syncthreads();

    // 2. segments: a class's first position starts one, its end found by a binary search
    if (tid < n && (tid == 0 || f_group[tid - 1] != f_group[tid])) {
        const unsigned int group = f_group[tid];
        int lo = tid + 1, hi = n;
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (f_group[mid] == group) lo = mid + 1;
            else hi = mid;
        }
        const unsigned int s = atomicAdd(&s_segments, 1u);
        f_seg_first[s] = tid;
        f_seg_end[s] = lo;
        if (lo - tid > LAZY_MAX) {  // rows x the words they span; the masked segments below bit 11
            const unsigned int words = (lo - tid) * ((lo - 1) / 32 - tid / 32 + 1);
            const unsigned int before = atomicAdd(&s_masked, (words << 11) | 1u);
            s_masked_seg[before & 0x7ffu] = s;
            s_masked_off[before & 0x7ffu] = before >> 11;
            f_seg_off[s] = before >> 11;
        }
    }
    __syncthreads();
    const int segments = s_segments, masked = s_masked & 0x7ffu, mask_words = s_masked >> 11;

    // 3. the masks of the segments above LAZY_MAX: word q is masked segment i's row first +
    //    (q - off) % m against word w0 + (q - off) / m. Where the words are few, g lanes make
    //    a word (g a power of two: the most that still give each group of g lanes one word at
    //    most), each testing every g-th of its 32 positions, and an OR across the g lanes
    //    joins them; with as many words as threads or more, one thread a word.
    const IouThreshold threshold(iou_threshold);
    if (masked > 0) {  // block-uniform
        int g = 1;
        while (g < 32 && mask_words * (2 * g) <= NMS_THREADS) g <<= 1;
        for (int base = 0; base < mask_words; base += NMS_THREADS / g) {  // whole warps: every lane reaches the OR
            const int q = base + tid / g, k0 = tid % g;
            unsigned int bits = 0u;
            bool store = false;
            if (q < mask_words) {
                int i = 0;  // the last masked segment whose words start at or before q (offsets ascend)
                while (i + 1 < masked && (int)s_masked_off[i + 1] <= q) ++i;
                const int s = s_masked_seg[i];
                const int first = f_seg_first[s], last = f_seg_end[s], m = last - first;
                const int local = q - (int)s_masked_off[i], w = first / 32 + local / m, r = first + local % m;
                if (w >= r / 32) {  // else read by no resolve
                    store = k0 == 0;
                    const Box<A> box = f_box[r];
                    const A area = f_area[r];
                    const int k_from = max(r + 1 - 32 * w, 0), k_to = min(last - 32 * w, 32);
                    int k = k0;
                    if (k < k_from) k += (k_from - k + g - 1) / g * g;  // this lane's first position past r
                    for (; k < k_to; k += g)
                        if (overlaps_decisive(box, area, f_box[32 * w + k], f_area[32 * w + k], threshold))
                            bits |= 1u << k;
                }
            }
            for (int d = 1; d < g; d <<= 1) bits |= __shfl_xor_sync(0xffffffffu, bits, d);
            if (store) f_mask[q] = bits;
        }
        __syncthreads();
    }

    // 4. a warp a segment
    const int cap = min(max_per_class, max_output);
    for (int s = warp; s < segments; s += NMS_WARPS) {
        const int first = f_seg_first[s], last = f_seg_end[s], m = last - first;
        int keeps = 0;
        if (m <= LAZY_MAX) {  // uniform over the warp
            // lane i < words holds the segment's removed word i (its candidates 32 i + k, at
            // position first + 32 i + k); candidates past m start removed
            const int words = (m + 31) / 32;
            unsigned int removed = lane >= words ? 0xffffffffu : m - 32 * lane >= 32 ? 0u : 0xffffffffu << (m - 32 * lane);
            while (keeps < cap) {
                const unsigned int open = __ballot_sync(0xffffffffu, removed != 0xffffffffu);
                if (open == 0u) break;
                const int w = __ffs(open) - 1;
                const int r = 32 * w + __ffs(~__shfl_sync(0xffffffffu, removed, w)) - 1;  // the first live one
                ++keeps;
                if (lane == 0) atomicOr(&f_keep[(first + r) / 32], 1u << ((first + r) % 32));  // shared words
                const Box<A> kept = f_box[first + r];
                const A kept_area = f_area[first + r];
                unsigned int out = 0u;  // lane i: word i's candidates removed by this keep (itself among them)
                for (int i = w; i < words; ++i) {  // no iteration waits on another's tests
                    const unsigned int word = __shfl_sync(0xffffffffu, removed, i);
                    const int j = 32 * i + lane;
                    bool gone = j == r;
                    if (j > r && !((word >> lane) & 1u))  // live, so inside the segment
                        gone = overlaps_decisive(kept, kept_area, f_box[first + j], f_area[first + j], threshold);
                    const unsigned int bits = __ballot_sync(0xffffffffu, gone);
                    if (lane == i) out = bits;
                }
                removed |= out;
            }
        } else {
            const int off = f_seg_off[s], w0 = first / 32, span = (last - 1) / 32 - w0 + 1;
            unsigned int removed = 0xffffffffu;
            if (lane < span) {  // positions outside the segment start removed
                const int lo = 32 * (w0 + lane);
                unsigned int live = 0xffffffffu;
                if (first > lo) live &= 0xffffffffu << (first - lo);
                if (last - lo < 32) live &= (1u << (last - lo)) - 1u;
                removed = ~live;
            }
            while (keeps < cap) {
                const unsigned int live = ~removed;
                const unsigned int lanes = __ballot_sync(0xffffffffu, live != 0u);
                if (lanes == 0u) break;
                const int word = __ffs(lanes) - 1;
                const int bit = __ffs(__shfl_sync(0xffffffffu, live, word)) - 1;
                const int r = 32 * (w0 + word) + bit;
                if (lane == 0) atomicOr(&f_keep[r / 32], 1u << bit);  // segments share boundary words
                ++keeps;
                if (lane == word) removed |= 1u << bit;
                if (lane >= word && lane < span) removed |= f_mask[off + lane * m + (r - first)];
            }
        }
    }
    __syncthreads();

    // 5. the keeps in rank order (score key << 32 | tie, unique), staged in position order:
    //    each thread finds its keep's place among them from the keep bits, no scan; up to
    //    COUNT_SORT_MAX keeps write_ranked_keeps writes them, more take the sort.
    const int keep_words = (n + 31) / 32;
    int detections = 0, e = 0;
    for (int w = 0; w < keep_words; ++w) {  // every thread: the same total
        const int bits = __popc(f_keep[w]);
        detections += bits;
        if (w < tid / 32) e += bits;
    }
    if (tid < n && ((f_keep[tid / 32] >> (tid % 32)) & 1u)) {
        e += __popc(f_keep[tid / 32] & ((1u << (tid % 32)) - 1u));
        staged_key[e] = (key << 32) | tie;
        staged_val[e] = tid;
    }
    __syncthreads();
    const int output = min(detections, max_output);
    if (detections <= COUNT_SORT_MAX) {  // block-uniform
        write_ranked_keeps(b, detections, output, max_output, staged_key, staged_val, f_box, f_score, f_label, f_cand,
                           multi_label, classes, out_boxes, out_scores, out_classes, out_indices);
    } else {
        int q = 32;
        while (q < detections) q <<= 1;
        unsigned long long rank_key = 0ull;
        unsigned int rank_tie = 0u, position = 0xffffffffu;
        if (tid < detections) {
            rank_key = staged_key[tid];
            position = staged_val[tid];
        }
        block_sort(rank_key, rank_tie, position, detections, q, x_key, x_tie, x_val);
        if (tid < output)
            write_detection((long long)b * max_output + tid, f_box[position], f_score[position],
                            (long long)f_label[position], f_cand[position], multi_label, classes, out_boxes,
                            out_scores, out_classes, out_indices);
    }
    pad_detections(b, output, max_output, out_boxes, out_scores, out_classes, out_indices);
    if (tid == 0) num_detections[b] = output;
    return true;
}

// The warp's maximum of v, in every lane.
__device__ __forceinline__ unsigned int warp_max(unsigned int v) {
#if __CUDA_ARCH__ >= 800
    return __reduce_max_sync(0xffffffffu, v);
#else
    for (int d = 16; d > 0; d >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, d));
    return v;
#endif
}

// A masked run's mask (m candidates in rank order, words = (m + 31) / 32 words a row; bit
// k of row r's word w set iff r suppresses rank 32 w + k > r) holds only the words its
// resolve reads: row r's words r / 32 .. words - 1. Row block j (rows 32 j .. , rows_j of
// them) follows the j full blocks before it (32 rows of words - j' words each) and holds its
// words one after another, each the block's rows side by side, so that the threads making
// neighbouring words read the same boxes (of ranks 32 w + k) rather than boxes 32 apart,
// which share a bank.
__device__ __forceinline__ int mask_word_index(int m, int r, int w) {
    const int words = (m + 31) / 32, j = r / 32;
    return 32 * (j * words - j * (j - 1) / 2) + (w - j) * min(32, m - 32 * j) + (r - 32 * j);
}

// The words a masked run of m candidates holds: each row block's rows times its words.
__device__ __forceinline__ unsigned int mask_words_of_run(unsigned int m) {
    const unsigned int words = (m + 31u) / 32u;
    unsigned int total = 0u;
    for (unsigned int j = 0u; j < words; ++j) total += min(32u, m - 32u * j) * (words - j);
    return total;
}

// The row r and the word w of a masked run's word u (mask_word_index's inverse).
__device__ __forceinline__ void mask_word_at(int m, int u, int& r, int& w) {
    const int words = (m + 31) / 32;
    int j = 0;
    for (;;) {  // u is below mask_words_of_run(m): some block holds it
        const int block = min(32, m - 32 * j) * (words - j);
        if (u < block) break;
        u -= block;
        ++j;
    }
    const int rows = min(32, m - 32 * j);
    r = 32 * j + u % rows;
    w = j + u / rows;
}

// The same answer as segmented_nms without sorting the image's candidates, for images
// whose classes are all small (at most SELECT_MAX candidates, a multiple of 32): true when
// it wrote the outputs, false (nothing written, block-uniform) where segmented_nms must run
// instead: a class above SELECT_MAX, more than COUNT_SORT_MAX keeps, or a class beyond 32
// bits. The steps, each over the whole block:
//   1. every record read once; its class placed in a hash table in shared memory (open
//      addressing; a slot a class), the slot's count giving the candidate its place in
//      the class;
//   2. each class a run ("segment") of positions, taken from a shared counter by its
//      first candidate; a run of more than 32 also takes mask words;
//   3. each candidate written to its class's run (in no particular order); in a run of
//      more than 32, its rank in the run (the run's candidates with a larger key, counted
//      by several threads a candidate where the block has them) and its box at that rank;
//   4. the masks of the runs of more than 32, in rank order, only the words a resolve
//      reads (mask_word_index), several threads a word where the block has them;
//   5. a warp a segment, until none is live or min(max_per_class, max_output) are kept
//      (a class's later keeps rank below max_output others): a run of up to 32 (a lane a
//      candidate) by selection, the live candidate with the largest key (score, then lower
//      index; keys are unique, so the order within the run does not matter) kept and the
//      live ones it suppresses removed: a warp maximum and one test a lane a keep; a
//      larger run from its masks (lane l holds removed word l, a ballot finds the next
//      live rank): the selection's tests a keep grow with the run, the masks' are side by
//      side over the block;
//   6. the keeps (listed by a shared counter) sorted by key; the first max_output are the
//      detections.
// Shared memory (dynamic, carved in this order; batched_nms.select_shared_bytes computes the
// same): by position the keys, boxes, areas, scores, candidate indices and labels; the hash
// table's classes, counts and run starts (2 fast_max slots); by segment first, size and
// mask offset; the keeps' keys and positions; by rank in a run its position, box and area;
// the masks.
template <typename T>
__device__ bool select_nms(int b, int n, int fast_max, const unsigned long long* keys, const int* cands,
                           const long long* cand_classes, const typename Arith<T>::type* cand_boxes,
                           const typename Arith<T>::type* cand_scores, int capacity, int classes, int multi_label,
                           int class_agnostic, double iou_threshold, int max_output, int max_per_class,
                           long long* num_detections, T* out_boxes, T* out_scores, long long* out_classes,
                           long long* out_indices) {
    typedef typename Arith<T>::type A;
    static_assert(SELECT_MAX % 32 == 0 && SELECT_MAX <= 32 * 32, "a lane holds each of a run's removed words");
    constexpr int MASKED_MAX = NMS_THREADS / 33;  // runs of more than 32 an image holds at most
    extern __shared__ __align__(16) unsigned char shared[];
    __shared__ unsigned int s_segments, s_next, s_keeps;
    __shared__ unsigned long long s_masked;  // the masked runs' candidates << 43 | mask words << 11 | runs
    __shared__ unsigned int s_masked_first[MASKED_MAX], s_masked_size[MASKED_MAX], s_masked_off[MASKED_MAX],
        s_masked_cand[MASKED_MAX];
    unsigned char* at = shared;
    unsigned long long* g_key = (unsigned long long*)carve(at, 8ull * fast_max);
    Box<A>* g_box = (Box<A>*)carve(at, sizeof(Box<A>) * fast_max);
    A* g_area = (A*)carve(at, sizeof(A) * fast_max);
    A* g_score = (A*)carve(at, sizeof(A) * fast_max);
    int* g_cand = (int*)carve(at, 4ull * fast_max);
    int* g_label = (int*)carve(at, 4ull * fast_max);
    unsigned long long* t_class = (unsigned long long*)carve(at, 8ull * 2 * fast_max);
    unsigned int* t_count = (unsigned int*)carve(at, 4ull * 2 * fast_max);
    unsigned int* t_start = (unsigned int*)carve(at, 4ull * 2 * fast_max);
    unsigned int* seg_first = (unsigned int*)carve(at, 4ull * fast_max);
    unsigned int* seg_size = (unsigned int*)carve(at, 4ull * fast_max);
    unsigned int* seg_off = (unsigned int*)carve(at, 4ull * fast_max);
    unsigned long long* k_key = (unsigned long long*)carve(at, 8ull * fast_max);
    unsigned int* k_pos = (unsigned int*)carve(at, 4ull * fast_max);
    unsigned int* r_pos = (unsigned int*)carve(at, 4ull * fast_max);
    Box<A>* r_box = (Box<A>*)carve(at, sizeof(Box<A>) * fast_max);
    A* r_area = (A*)carve(at, sizeof(A) * fast_max);
    unsigned int* mask = (unsigned int*)carve(at, 4ull * fast_max * (SELECT_MAX / 32));
    constexpr unsigned long long EMPTY = 0xffffffffffffffffull;  // no class (classes are 32-bit)

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const long long image = (long long)b * capacity;
    const unsigned int slots = 2u * fast_max, table_bits = __ffs(slots) - 1;  // a power of two

    // 1. the records, and the hash table emptied
    for (unsigned int h = tid; h < slots; h += NMS_THREADS) {
        t_class[h] = EMPTY;
        t_count[h] = 0u;
    }
    if (tid == 0) {
        s_segments = 0u;
        s_next = 0u;
        s_keeps = 0u;
        s_masked = 0ull;
    }
    unsigned long long key = 0ull, group = 0ull;
    Box<A> box = {A(0), A(0), A(0), A(0)};
    A score = A(0);
    int cand = 0, label = 0;
    bool wide = false;
    if (tid < n) {
        const long long row = image + tid;
        key = keys[row];  // score key << 32 | ~candidate: unique, larger ranks first
        const long long cls = cand_classes[row];
        box = {cand_boxes[4 * row], cand_boxes[4 * row + 1], cand_boxes[4 * row + 2], cand_boxes[4 * row + 3]};
        score = cand_scores[row];
        cand = cands[row];
        label = (int)cls;
        wide = cls != (long long)label;  // the label is written back from 32 bits
        group = class_agnostic ? 0ull : (unsigned long long)(unsigned int)label;
    }
    if (__syncthreads_or(wide)) return false;
    unsigned int slot = 0u, local = 0u;
    if (tid < n) {
        slot = ((unsigned int)group * 2654435761u) >> (32 - table_bits);  // the high bits of a multiplicative hash
        for (;;) {  // at most n classes in 2 fast_max slots: a free slot is always found
            const unsigned long long before = atomicCAS(&t_class[slot], EMPTY, group);
            if (before == EMPTY || before == group) break;
            slot = (slot + 1u) & (slots - 1u);
        }
        local = atomicAdd(&t_count[slot], 1u);
    }
    __syncthreads();

    // 2. a class's first candidate (local 0) takes its segment, run and mask words
    bool big = false;
    if (tid < n && local == 0u) {
        const unsigned int m = t_count[slot];
        big = m > SELECT_MAX;
        const unsigned int s = atomicAdd(&s_segments, 1u), start = atomicAdd(&s_next, m);
        seg_first[s] = start;
        seg_size[s] = m;
        t_start[slot] = start;
        if (m > 32u && !big) {  // the words its rows read (mask_words_of_run), in rank order
            const unsigned long long before =
                atomicAdd(&s_masked, (unsigned long long)m << 43 | (unsigned long long)mask_words_of_run(m) << 11 | 1ull);
            const unsigned int i = (unsigned int)before & 0x7ffu;  // both offsets ascend with i
            s_masked_first[i] = start;
            s_masked_size[i] = m;
            s_masked_off[i] = (unsigned int)(before >> 11);
            s_masked_cand[i] = (unsigned int)(before >> 43);
            seg_off[s] = (unsigned int)(before >> 11);
        }
    }
    if (__syncthreads_or(big)) return false;

    // 3. the candidates into their runs
    const unsigned int run = tid < n ? t_start[slot] : 0u;
    if (tid < n) {
        const unsigned int position = run + local;
        g_key[position] = key;
        g_box[position] = box;
        g_area[position] = box_area(box);
        g_score[position] = score;
        g_cand[position] = cand;
        g_label[position] = label;
    }
    const unsigned long long masked_all = s_masked;
    const int masked = (int)(masked_all & 0x7ffu), mask_words = (int)(unsigned int)(masked_all >> 11),
              masked_cands = (int)(masked_all >> 43);
    const IouThreshold threshold(iou_threshold);
    __syncthreads();
    if (masked > 0) {  // block-uniform
        // the masked runs' candidates by rank (the run's candidates with a larger key), g
        // threads counting for each (every g-th of its run, a sum joining them; at most
        // fast_max candidates, so one pass); candidate u of the masked runs is run i's
        // u - s_masked_cand[i]
        int g = 1;
        while (g < 32 && masked_cands * (2 * g) <= NMS_THREADS) g <<= 1;
        {
            const int u = tid / g;
            unsigned int rank = 0u, first = 0u, position = 0u;
            if (u < masked_cands) {
                int i = 0;  // the last masked run whose candidates start at or before u
                while (i + 1 < masked && (int)s_masked_cand[i + 1] <= u) ++i;
                first = s_masked_first[i];
                position = first + (unsigned int)u - s_masked_cand[i];
                const unsigned long long mine = g_key[position];
                const unsigned int end = first + s_masked_size[i];
#pragma unroll 4
                for (unsigned int j = first + tid % g; j < end; j += g) rank += g_key[j] > mine;
            }
            for (int d = 1; d < g; d <<= 1) rank += __shfl_xor_sync(0xffffffffu, rank, d);  // whole warps
            if (u < masked_cands && tid % g == 0) {
                r_pos[first + rank] = position;
                r_box[first + rank] = g_box[position];
                r_area[first + rank] = g_area[position];
            }
        }
        __syncthreads();
        // 4. word q is masked run i's word q - s_masked_off[i] (mask_word_at gives its row and
        //    its word in the row); g lanes make a word where the words are few (each testing
        //    every g-th of its 32 positions, an OR joining them), one thread a word with as
        //    many words as threads or more
        g = 1;
        while (g < 32 && mask_words * (2 * g) <= NMS_THREADS) g <<= 1;
        for (int base = 0; base < mask_words; base += NMS_THREADS / g) {  // whole warps: every lane reaches the OR
            const int q = base + tid / g, k0 = tid % g;
            unsigned int bits = 0u;
            if (q < mask_words) {
                int i = 0;  // the last masked run whose words start at or before q
                while (i + 1 < masked && (int)s_masked_off[i + 1] <= q) ++i;
                const int first = s_masked_first[i], m = s_masked_size[i];
                int r, w;
                mask_word_at(m, q - (int)s_masked_off[i], r, w);
                const Box<A> row_box = r_box[first + r];
                const A row_area = r_area[first + r];
                const int k_from = max(r + 1 - 32 * w, 0), k_to = min(m - 32 * w, 32);
                int k = k0;
                if (k < k_from) k += (k_from - k + g - 1) / g * g;  // this lane's first position past r
                for (; k < k_to; k += g)
                    if (overlaps_decisive(row_box, row_area, r_box[first + 32 * w + k], r_area[first + 32 * w + k],
                                          threshold))
                        bits |= 1u << k;
            }
            for (int d = 1; d < g; d <<= 1) bits |= __shfl_xor_sync(0xffffffffu, bits, d);
            if (q < mask_words && k0 == 0) mask[q] = bits;
        }
        __syncthreads();
    }
    const int segments = s_segments;

    // 5. a warp a segment
    const int cap = min(max_per_class, max_output);  // a class's later keeps rank below max_output others
    for (int s = warp; s < segments; s += NMS_WARPS) {
        const int first = seg_first[s], m = seg_size[s];
        int keeps = 0;
        if (m > 32) {  // uniform over the warp: from the masks, in rank order
            const int off = seg_off[s], words = (m + 31) / 32;
            unsigned int removed = lane >= words ? 0xffffffffu : m - 32 * lane >= 32 ? 0u : 0xffffffffu << (m - 32 * lane);
            while (keeps < cap) {
                const unsigned int lanes = __ballot_sync(0xffffffffu, removed != 0xffffffffu);
                if (lanes == 0u) break;
                const int w = __ffs(lanes) - 1;
                const int bit = __ffs(~__shfl_sync(0xffffffffu, removed, w)) - 1, r = 32 * w + bit;
                if (lane == 0) {
                    const unsigned int position = r_pos[first + r], q = atomicAdd(&s_keeps, 1u);
                    k_key[q] = g_key[position];
                    k_pos[q] = position;
                }
                ++keeps;
                if (lane == w) removed |= 1u << bit;
                if (lane >= w && lane < words) removed |= mask[off + mask_word_index(m, r, lane)];
            }
            continue;
        }
        // by selection: lane l holds the run's candidate l
        bool live = lane < m;
        unsigned long long held_key = 0ull;  // key 0 is no candidate's
        Box<A> held_box = {A(0), A(0), A(0), A(0)};
        A held_area = A(0);
        if (live) {
            held_key = g_key[first + lane];
            held_box = g_box[first + lane];
            held_area = g_area[first + lane];
        }
        while (keeps < cap) {
            const unsigned long long best = live ? held_key : 0ull;
            const unsigned int hi = warp_max((unsigned int)(best >> 32));
            if (hi == 0u) break;  // none live (a candidate's score key is never 0)
            const unsigned int lo = warp_max((unsigned int)(best >> 32) == hi ? (unsigned int)best : 0u);
            const unsigned long long kept_key = ((unsigned long long)hi << 32) | lo;
            const int winner = __ffs(__ballot_sync(0xffffffffu, best == kept_key)) - 1;  // keys are unique
            if (lane == 0) {
                const unsigned int q = atomicAdd(&s_keeps, 1u);
                k_key[q] = kept_key;
                k_pos[q] = first + winner;
            }
            ++keeps;
            const Box<A> kept_box = g_box[first + winner];
            const A kept_area = g_area[first + winner];
            // the keep itself, and the live candidates it suppresses
            if (live && (lane == winner || overlaps_decisive(kept_box, kept_area, held_box, held_area, threshold)))
                live = false;
        }
    }
    __syncthreads();
    const int detections = s_keeps;
    if (detections > COUNT_SORT_MAX) return false;  // block-uniform: the sorted path's merge sort ranks them

    // 6. the keeps in rank order
    const int output = min(detections, max_output);
    write_ranked_keeps(b, detections, output, max_output, k_key, k_pos, g_box, g_score, g_label, g_cand, multi_label,
                       classes, out_boxes, out_scores, out_classes, out_indices);
    pad_detections(b, output, max_output, out_boxes, out_scores, out_classes, out_indices);
    if (tid == 0) num_detections[b] = output;
    return true;
}
