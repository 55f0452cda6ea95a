// hard_fused: exact greedy NMS (family hard), our own design; the host side is cuda.py beside
// this file, the design implementations/DESIGN.md. SMALL_MAX, SMALL_THREADS, ROUND_WORDS,
// RESOLVE_THREADS, TILE_WARPS, STAGED_THREADS and MID_THREADS come from cuda.py's DEFINES
// (NVRTC -D), so host and kernels share one value of each.
//
// Every kernel writes the same outputs: keep[0, count) the kept boxes' input indices in
// rank order, keep[count, n) = -1 (the padded output), *count_out = count on the device
// and, when host_count is not null, the count into mapped pinned host memory (the host
// then learns it with one stream synchronization and no copy).
// The single-launch kernels (one_block, cooperative) read every score and box anyway;
// when verdict_host is not null they also report there whether any row breaks run_nms's
// value rules (row_is_bad in _common.cuh; the other paths' rank does it), read in the
// same synchronization as the count.

#define SMALL_WORDS (SMALL_MAX / 32)

// The suppression test of a pair (a ranked above b). Without DIOU_BETA: hard NMS's, the
// IoU above the threshold. With DIOU_BETA defined (diou_nms's module of this file, one per
// beta): DIoU-NMS's, IoU - (rho^2 / c^2)^beta above the threshold, in double as
// implementations/diou_nms.py computes it. The penalty is >= 0, so only pairs whose IoU is
// above the threshold can pass: the IoU test rejects first, the penalty is computed for
// the rest (beta = 1 without pow; other betas take CUDA's pow, within 2 ulp of the C
// library's, which moves a decision only for a pair within ~1e-16 of the threshold).
#ifdef DIOU_BETA
// For float boxes and beta = 1 the penalty is first estimated in float: where v - estimate
// is farther from the threshold than the estimate's error bound, 2^-19 (M/s + 2) with M
// the largest |coordinate| and s the enclosing box's larger side (DESIGN.md derives it),
// that decides, else the double test does. Most pairs never pay the double divisions.
// -1: not decided by the estimate.
__device__ __forceinline__ int diou_float_decision(float ax1, float ay1, float ax2, float ay2, float bx1, float by1,
                                                   float bx2, float by2, double v, double threshold) {
    const float cw = fmaxf(ax2, bx2) - fminf(ax1, bx1), ch = fmaxf(ay2, by2) - fminf(ay1, by1);
    const float s = fmaxf(cw, ch);
    const float m = fmaxf(fmaxf(fmaxf(fabsf(ax1), fabsf(ay1)), fmaxf(fabsf(ax2), fabsf(ay2))),
                          fmaxf(fmaxf(fabsf(bx1), fabsf(by1)), fmaxf(fabsf(bx2), fabsf(by2))));
    if (!(s >= 0x1p-60f && m <= 0x1p60f)) return -1;  // no subnormal halves, no square overflows; NaN fails
    const float dx = (ax1 * 0.5f + ax2 * 0.5f) - (bx1 * 0.5f + bx2 * 0.5f);
    const float dy = (ay1 * 0.5f + ay2 * 0.5f) - (by1 * 0.5f + by2 * 0.5f);
    const float estimate = (dx * dx + dy * dy) / (cw * cw + ch * ch);
    const double margin = double((m / s + 2.0f) * 0x1p-19f);
    const double d = v - double(estimate) - threshold;
    return d > margin ? 1 : (d < -margin ? 0 : -1);
}

template <typename A>
__device__ __forceinline__ bool diou_above(const Box<A>& a, const Box<A>& b, double threshold) {
    const double v = double(box_iou(a, b));
    if (sizeof(A) == 4 && DIOU_BETA == 1.0) {
        const int decided = diou_float_decision(float(a.x1), float(a.y1), float(a.x2), float(a.y2), float(b.x1),
                                                float(b.y1), float(b.x2), float(b.y2), v, threshold);
        if (decided >= 0) return decided == 1;
    }
    const double ax1 = a.x1, ay1 = a.y1, ax2 = a.x2, ay2 = a.y2, bx1 = b.x1, by1 = b.y1, bx2 = b.x2, by2 = b.y2;
    const double cw = fmax(ax2, bx2) - fmin(ax1, bx1), ch = fmax(ay2, by2) - fmin(ay1, by1);
    const double s = fmax(cw, ch);
    double penalty = 0.0;
    if (s != 0.0) {  // every length divided by the enclosing box's larger side: no square overflows
        const double dx = ((ax1 / 2.0 + ax2 / 2.0) - (bx1 / 2.0 + bx2 / 2.0)) / s;
        const double dy = ((ay1 / 2.0 + ay2 / 2.0) - (by1 / 2.0 + by2 / 2.0)) / s;
        const double cwn = cw / s, chn = ch / s;
        const double ratio = (dx * dx + dy * dy) / (cwn * cwn + chn * chn);
        penalty = DIOU_BETA == 1.0 ? ratio : pow(ratio, double(DIOU_BETA));
    }
    return v - penalty > threshold;  // a NaN penalty never suppresses
}
#define SUPPRESSES(a, area_a, b, area_b, t) (overlaps_decisive(a, area_a, b, area_b, t) && diou_above(a, b, (t).exact))
#else
#define SUPPRESSES(a, area_a, b, area_b, t) overlaps_decisive(a, area_a, b, area_b, t)
#endif

__device__ __forceinline__ unsigned int valid_bits(int n, int word) {
    const int valid = n - word * 32;
    return valid >= 32 ? 0xffffffffu : (1u << valid) - 1u;
}

// Decides one 32-box word in one warp's registers: lane k holds own_row, the bits of box
// word * 32 + k inside this word (boxes after it only); `alive` is the word's boxes that
// no earlier kept box removed. Returns the kept boxes' bits, the same in every lane.
// One deciding warp is the critical path of every resolve, so this is about the length
// of its dependent instruction chain.
// Few alive (clustered boxes, mostly removed already): box by box, the first undecided
// one is kept and removes its row: one shuffle per kept box. Many alive: in waves: a box
// is ready when no undecided box would remove it (the OR of the undecided boxes' rows);
// every ready box is kept (a box removed by a kept one is decided at once, so a ready box
// was removed by nobody), and the rows of the newly kept remove theirs. Two warp ORs per
// wave; waves = the longest chain of suppressions among the undecided, not the number kept.
#define SEQUENTIAL_MAX_ALIVE 8
__device__ __forceinline__ unsigned int decide_word(unsigned int alive, unsigned int own_row) {
    const int lane = threadIdx.x % 32;
    unsigned int kept = 0u, undecided = alive;  // the same in every lane: no divergence
    if (__popc(alive) <= SEQUENTIAL_MAX_ALIVE) {
        while (undecided != 0u) {
            const int k = __ffs(undecided) - 1;  // every box before it is decided and none removed it
            kept |= 1u << k;
            undecided &= ~(1u << k) & ~__shfl_sync(0xffffffffu, own_row, k);
        }
        return kept;
    }
    while (undecided != 0u) {  // the lowest undecided box is always ready: progress
        const unsigned int ready = undecided & ~warp_or((undecided >> lane) & 1u ? own_row : 0u);
        kept |= ready;
        undecided &= ~ready & ~warp_or((ready >> lane) & 1u ? own_row : 0u);
    }
    return kept;
}

// Lanes whose bit is set in `kept` write their box's input index to keep[count + its
// place among the kept]; returns the new count (in every lane).
__device__ __forceinline__ int write_kept(unsigned int kept, int lane, int count, long long index, long long* keep) {
    if (kept & (1u << lane)) keep[count + __popc(kept & ((1u << lane) - 1u))] = index;
    return count + __popc(kept);
}

// The greedy resolve of words <= 32 in one warp, from a mask in shared memory: lane w
// holds the "removed" word w; row r's word w is rows[r * stride + w] (written for
// w >= r / 32, the only words read). Writes the kept boxes' input indices index_of[row]
// to keep in rank order; returns their count (in every lane). The whole warp calls it.
template <typename Index>
__device__ __forceinline__ int resolve_in_warp(const unsigned int* rows, int stride, const Index* index_of, int n,
                                               int words, long long* keep) {
    const int lane = threadIdx.x % 32;
    unsigned int removed = 0u;
    int count = 0;
    for (int word = 0; word < words; ++word) {
        const int row = word * 32 + lane;
        const unsigned int own_row = row < n ? rows[row * stride + word] : 0u;
        const unsigned int kept = decide_word(~__shfl_sync(0xffffffffu, removed, word) & valid_bits(n, word), own_row);
        if (lane > word && lane < words && kept != 0u) {  // kept rows are < n, and lane >= their word
            const unsigned int* kept_rows = rows + word * 32 * stride + lane;
            unsigned int bits = 0u;
            if (__popc(kept) <= 4) {  // few: one load per kept row
                for (unsigned int left = kept; left != 0u; left &= left - 1u) bits |= kept_rows[(__ffs(left) - 1) * stride];
            } else {
#pragma unroll
                for (int k = 0; k < 32; ++k)  // independent predicated loads, all in flight
                    if ((kept >> k) & 1u) bits |= kept_rows[k * stride];
            }
            removed |= bits;
        }
        count = write_kept(kept, lane, count, row < n ? (long long)index_of[row] : 0, keep);
    }
    return count;
}

__device__ __forceinline__ void finish(int count, int n, long long* keep, long long* count_out, long long* host_count) {
    for (int i = count + threadIdx.x; i < n; i += blockDim.x) keep[i] = -1;
    if (threadIdx.x == 0) {
        *count_out = count;
        if (host_count != nullptr) *host_count = count;
    }
}

// ---------------------------------------------------------------- "one_block": N <= SMALL_MAX, one launch
// One block of SMALL_THREADS does everything in shared memory. Everything on one SM is
// latency-bound, so the work is spread over all threads: the rank of each box is counted
// by RANK_SPLIT threads over slices of the others; each (row, word) of the suppression
// mask is one thread's loop over the word's 32 boxes (the column box is the same for the
// threads of a row group: a broadcast), or a few lanes' where the block has threads to
// spare; warp 0 resolves, lane w holding "removed" word w.
#define RANK_SPLIT (SMALL_THREADS / SMALL_MAX)

template <typename T>
__global__ void __launch_bounds__(SMALL_THREADS) small_nms_kernel(const T* boxes, const T* scores, const long long* labels, int n,
                                 double iou_threshold, long long* keep, long long* count_out,
                                 long long* host_count, long long* verdict_host) {
    typedef typename Arith<T>::type A;
    __shared__ unsigned long long key[SMALL_MAX];
    __shared__ int partial_rank[RANK_SPLIT][SMALL_MAX];
    __shared__ int input_index[SMALL_MAX];
    __shared__ Box<A> box[SMALL_MAX];
    __shared__ A area[SMALL_MAX];
    __shared__ long long label[SMALL_MAX];
    __shared__ unsigned int mask[SMALL_MAX][SMALL_WORDS + 1];  // an odd row stride: no bank conflicts
    __shared__ int kept_count;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    bool bad = false;
    for (int j = tid; j < n; j += blockDim.x) {
        const A score = A(load_value(scores, j));
        bad |= !isfinite(score);
        key[j] = score_key(score);
    }
    __syncthreads();
    {
        const int j = tid % SMALL_MAX, part = tid / SMALL_MAX;
        const int slice = (n + RANK_SPLIT - 1) / RANK_SPLIT, begin = part * slice, end = min(n, begin + slice);
        if (j < n) {
            int above = 0;
            for (int i = begin; i < end; ++i) above += ranks_above(key[i], i, key[j], j);
            partial_rank[part][j] = above;
        }
    }
    __syncthreads();
    for (int j = tid; j < n; j += blockDim.x) {
        int rank = 0;
        for (int part = 0; part < RANK_SPLIT; ++part) rank += partial_rank[part][j];
        input_index[rank] = j;
        const Box<A> b = load_box(boxes, j);
        bad |= box_is_bad(b);
        box[rank] = b;
        area[rank] = box_area(b);
        label[rank] = labels != nullptr ? labels[j] : 0;
    }
    const int any_bad = __syncthreads_or(bad);  // also the barrier before the mask
    if (tid == 0 && any_bad && verdict_host != nullptr) report_bad_row(verdict_host);
    const IouThreshold threshold(iou_threshold);
    const int words = (n + 31) / 32, tasks = n * words;
    // Few (row, word) tasks (small N): each task's 32 columns split over `split` consecutive
    // lanes, their bits ORed by shuffles, so the pair tests of a dense input (DIoU's penalty
    // for every pair over the threshold) spread over the block. Every thread takes the same
    // number of turns: the shuffles see whole warps.
    int split = 1;
    while (split < 32 && 2 * split * tasks <= SMALL_THREADS) split *= 2;
    const int span = 32 / split, turns = (tasks * split + blockDim.x - 1) / blockDim.x;
    for (int turn = 0; turn < turns; ++turn) {
        const int t = turn * blockDim.x + tid, task = t / split, part = t % split;
        const int w = task / n, i = task % n;  // consecutive tasks: consecutive rows, one word
        const bool mine = task < tasks && w >= i / 32;  // tiles left of the diagonal are not written
        unsigned int bits = 0u;
        if (mine) {
            const Box<A> box_i = box[i];
            const A area_i = area[i];
            const long long label_i = label[i];
            const int first = max(i + 1, w * 32 + part * span), last = min(n, w * 32 + (part + 1) * span);
            for (int j = first; j < last; ++j)
                if (label[j] == label_i && SUPPRESSES(box_i, area_i, box[j], area[j], threshold))
                    bits |= 1u << (j - w * 32);
        }
        for (int offset = 1; offset < split; offset <<= 1) bits |= __shfl_xor_sync(0xffffffffu, bits, offset);
        if (mine && part == 0) mask[i][w] = bits;
    }
    __syncthreads();
    if (warp == 0) {
        const int count = resolve_in_warp(&mask[0][0], SMALL_WORDS + 1, input_index, n, words, keep);
        if (lane == 0) kept_count = count;
    }
    __syncthreads();
    finish(kept_count, n, keep, count_out, host_count);
}

// ---------------------------------------------------------------- the tile mask and the staged resolve
// The suppression mask (as _common.cuh's ballot_mask_kernel defines it) by 32 x 32 tiles:
// block (x, y) takes row word y (its 32 boxes in shared memory) against column words
// x * TILE_WARPS ... (one per warp, lane k holding column box k in registers). Each lane
// first marks the rows that may suppress its column (one shared-memory broadcast and the
// quick rejection, four comparisons, per pair), then takes the decisive IoU test for its
// marked rows alone, and a transpose by ballots gives lane k row k's word (skipped when
// the tile suppresses nothing). No barrier in the loops, each column box loaded once per
// 32 rows. Tiles left of the diagonal are not written.
// grid (ceil(words / TILE_WARPS), words), block 32 * TILE_WARPS.

// Row word `row_word` against column words first_column_word ... + WARPS - 1, one per warp
// of a WARPS-warp block (tile_mask_kernel's block, or a mask task of the streamed
// resolve); row_box, row_area, row_label: the block's shared memory for the 32 row boxes.
// The whole block calls it (one barrier inside), with first_column_word + WARPS - 1 >=
// row_word; it returns without a barrier after its mask words are written.
template <int WARPS, typename T>
__device__ __forceinline__ void mask_tiles(const T* sorted_boxes, const long long* sorted_labels, int n, int words,
                                           double iou_threshold, unsigned int* mask, int row_word,
                                           int first_column_word, Box<typename Arith<T>::type>* row_box,
                                           typename Arith<T>::type* row_area, long long* row_label) {
    typedef typename Arith<T>::type A;
    const bool has_labels = sorted_labels != nullptr;
    // With a threshold >= 0 only pairs with IoU > 0 vote: the quick rejection decides most
    // (a negative threshold, which the public API refuses, takes the exact test for all).
    const bool quick = iou_threshold >= 0.0;
    const int lane = threadIdx.x % 32, first_row = row_word * 32, rows = min(32, n - first_row);
    if (threadIdx.x < rows) {
        const Box<A> b = load_box(sorted_boxes, first_row + threadIdx.x);
        row_box[threadIdx.x] = quick ? quick_box(b) : b;
        row_area[threadIdx.x] = box_area(b);
        row_label[threadIdx.x] = has_labels ? sorted_labels[first_row + threadIdx.x] : 0;
    } else if (threadIdx.x < 32) {  // past the last box: written all the same (no read of unset memory)
        const A inf = infinity(A(0));
        row_box[threadIdx.x] = Box<A>{inf, inf, -inf, -inf};
        row_area[threadIdx.x] = A(0);
        row_label[threadIdx.x] = 0;
    }
    __syncthreads();
    const int column_word = first_column_word + threadIdx.x / 32;
    if (column_word < row_word || column_word >= words) return;  // warp-uniform
    const int j = column_word * 32 + lane;
    const bool column = j < n;
    const Box<A> real_j = column ? load_box(sorted_boxes, j) : Box<A>{0, 0, 0, 0};
    const Box<A> box_j = quick ? quick_box(real_j) : real_j;
    const A area_j = box_area(real_j);
    const long long label_j = column && has_labels ? sorted_labels[j] : 0;
    const IouThreshold threshold(iou_threshold);
    // First the cheap test for all 32 rows, a bit per row (row k may suppress column j:
    // k ranks above j and the boxes may overlap); then each lane takes the exact test for
    // its own candidates only. One lane in a warp with a candidate made the whole warp
    // walk the exact test for that row: at N = 32768 (clustered) 3 rows in 4 had one.
    unsigned int candidates = 0u;
    if (column) {
#pragma unroll 8
        for (int k = 0; k < 32; ++k)
            if (k < rows && (!quick || may_overlap(row_box[k], box_j))) candidates |= 1u << k;
        const int above = j - first_row;  // rows k < above rank above j (all on tiles right of the diagonal)
        if (above < 32) candidates &= (1u << above) - 1u;  // above >= 0: column_word >= row_word
    }
    unsigned int suppressed_by = 0u;  // bit k: row k suppresses column j
    while (candidates != 0u) {
        const int k = __ffs(candidates) - 1;
        candidates &= candidates - 1u;
        if ((!has_labels || row_label[k] == label_j) && SUPPRESSES(row_box[k], row_area[k], box_j, area_j, threshold))
            suppressed_by |= 1u << k;
    }
    // Transpose: lane k keeps row k's word (bit l: column l). Most tiles have none.
    unsigned int my_row_word = 0u;
    if (__any_sync(0xffffffffu, suppressed_by != 0u)) {
#pragma unroll
        for (int k = 0; k < 32; ++k) {
            const unsigned int bits = __ballot_sync(0xffffffffu, (suppressed_by >> k) & 1u);
            if (lane == k) my_row_word = bits;
        }
    }
    if (lane < rows) mask[(long long)(first_row + lane) * words + column_word] = my_row_word;
}

template <typename T>
__global__ void __launch_bounds__(32 * TILE_WARPS) tile_mask_kernel(const T* sorted_boxes, const long long* sorted_labels,
                                                                    int n, int words, double iou_threshold,
                                                                    unsigned int* mask) {
    typedef typename Arith<T>::type A;
    __shared__ Box<A> row_box[32];
    __shared__ A row_area[32];
    __shared__ long long row_label[32];
    const int row_word = blockIdx.y, first_column_word = blockIdx.x * TILE_WARPS;
    if (first_column_word + TILE_WARPS - 1 < row_word) return;  // block-uniform, before the barrier
    mask_tiles<TILE_WARPS>(sorted_boxes, sorted_labels, n, words, iou_threshold, mask, row_word, first_column_word,
                           row_box, row_area, row_label);
}

// Resolve for words <= 32 (N <= 1024). A warp resolving straight from global memory pays
// one memory latency per word (its loads for the next word cannot start earlier), so the
// whole block first copies the mask rows (row i from its own word i / 32 on; earlier
// words are never written) and the input indices into shared memory, every thread's
// loads in flight at once; then warp 0 resolves from shared memory, lane w holding the
// "removed" word w. Rows are words | 1 apart (an odd stride: a warp reading one word of
// 32 consecutive rows hits 32 different banks).
#define COPY_UNROLL 8
// The staged resolve's body, for any block size: the block copies, warp 0 resolves. Loads
// go to L2 (__ldcg): each value is read once, and in mid_nms_kernel the mask was written
// by other blocks of the same launch (after grid_barrier plain loads would see it too,
// but L1 has nothing to give here).
__device__ __forceinline__ void resolve_from_shared(const unsigned int* mask, const long long* order, int n, int words,
                                                    unsigned int* staged, int* kept_count, long long* keep,
                                                    long long* count_out, long long* host_count) {
    const int stride = words | 1;
    long long* index_of = reinterpret_cast<long long*>(staged + ((n * stride + 1) & ~1));  // 8-byte aligned
    // A warp per row, lane w copying word w (words <= 32: no division), COPY_UNROLL rows
    // in flight per warp; only the written words (w >= i / 32) are read.
    const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (int first = threadIdx.x / 32; first < n; first += COPY_UNROLL * warps) {
        unsigned int value[COPY_UNROLL];
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; ++u) {
            const int i = first + u * warps;
            value[u] = i < n && lane < words && lane >= i / 32 ? __ldcg(mask + (long long)i * words + lane) : 0u;
        }
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; ++u) {
            const int i = first + u * warps;
            if (i < n && lane < words && lane >= i / 32) staged[i * stride + lane] = value[u];
        }
    }
    for (int i = threadIdx.x; i < n; i += blockDim.x) index_of[i] = __ldcg(order + i);
    __syncthreads();
    if (threadIdx.x < 32) {
        const int count = resolve_in_warp(staged, stride, index_of, n, words, keep);
        if (threadIdx.x == 0) *kept_count = count;
    }
    __syncthreads();
    finish(*kept_count, n, keep, count_out, host_count);
}

extern "C" __global__ void __launch_bounds__(STAGED_THREADS) staged_resolve_kernel(
        const unsigned int* mask, const long long* order, int n, int words, long long* keep, long long* count_out,
        long long* host_count) {
    extern __shared__ __align__(16) unsigned int staged[];  // [n][words | 1] mask rows, then n input indices
    __shared__ int kept_count;
    resolve_from_shared(mask, order, n, words, staged, &kept_count, keep, count_out, host_count);
}

// ---------------------------------------------------------------- "cooperative": N <= 1024, one launch
// A cooperative launch (every block resident at once, which cuLaunchCooperativeKernel
// guarantees or refuses), so blocks can wait for each other. n / 32 blocks of 32 warps:
// every block puts all n score keys in shared memory and ranks its 32 boxes (a warp per
// box), grid barrier, every block puts all n ranked boxes in shared memory and writes
// its 32 mask rows (a warp per row, a ballot per word), grid barrier, and block 0
// resolves from shared memory. One launch instead of three plus two allocations, which
// were most of the op's host time at these sizes. What other blocks wrote is read once
// per block, from L2 (__ldcg).

// Dynamic shared memory: the larger of block 0's staged resolve (staged_shared_bytes) and
// the first two phases' n keys, n boxes and n labels (mid_shared_bytes in cuda.py).
template <typename T>
__global__ void __launch_bounds__(MID_THREADS, 1) mid_nms_kernel(
        const T* boxes, const T* scores, const long long* labels, int n, double iou_threshold,
        long long* order, Box<typename Arith<T>::type>* sorted_boxes, long long* sorted_labels, unsigned int* mask,
        unsigned int* barrier, long long* keep, long long* count_out, long long* host_count,
        long long* verdict_host) {
    typedef typename Arith<T>::type A;
    extern __shared__ __align__(16) unsigned int staged[];
    Box<A>* box = reinterpret_cast<Box<A>*>(staged);         // phase 2: ranked boxes
    long long* label = reinterpret_cast<long long*>(box + n);  // phase 2: ranked labels
    unsigned long long* key = reinterpret_cast<unsigned long long*>(label + n);  // phase 1: score keys
    A* area = reinterpret_cast<A*>(key);  // phase 2: ranked areas (the keys are dead by then)
    __shared__ int kept_count;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int words = (n + 31) / 32;
    bool bad = false;  // every block reads every score, then every box: block 0 tells the host
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const A score = A(load_value(scores, i));
        bad |= !isfinite(score);
        key[i] = score_key(score);
    }
    __syncthreads();
    const int j = blockIdx.x * (MID_THREADS / 32) + warp;  // this warp's box, then its mask row
    if (j < n) {
        const unsigned long long key_j = key[j];
        int above = 0;
        for (int i = lane; i < n; i += 32) above += ranks_above(key[i], i, key_j, j);
        above = warp_sum(above);
        if (lane == 0) {
            order[above] = j;
            sorted_boxes[above] = load_box(boxes, j);
            sorted_labels[above] = labels != nullptr ? labels[j] : 0;
        }
    }
    grid_barrier(barrier);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const A* from = reinterpret_cast<const A*>(sorted_boxes + i);
        const Box<A> b = {__ldcg(from), __ldcg(from + 1), __ldcg(from + 2), __ldcg(from + 3)};
        bad |= box_is_bad(b);  // the ranked boxes: all n, as loaded (any order will do)
        box[i] = b;
        area[i] = box_area(b);
        label[i] = __ldcg(sorted_labels + i);
    }
    const int any_bad = __syncthreads_or(bad);
    if (blockIdx.x == 0 && threadIdx.x == 0 && any_bad && verdict_host != nullptr) report_bad_row(verdict_host);
    if (j < n) {  // mask row j, from its own word on
        const IouThreshold threshold(iou_threshold);
        const Box<A> box_j = box[j];
        const A area_j = area[j];
        const long long label_j = label[j];
        for (int word = j / 32; word < words; ++word) {
            const int other = word * 32 + lane;
            const bool vote = other > j && other < n && label[other] == label_j &&
                              SUPPRESSES(box_j, area_j, box[other], area[other], threshold);
            const unsigned int bits = __ballot_sync(0xffffffffu, vote);
            if (lane == 0) mask[(long long)j * words + word] = bits;
        }
    }
    grid_barrier(barrier);  // also: this block's phase-2 shared reads are done
    if (blockIdx.x != 0) return;  // block-uniform
    resolve_from_shared(mask, order, n, words, staged, &kept_count, keep, count_out, host_count);
}

#include "block_resolve.cuh"  // resolve_in_rounds (and STREAM_WARPS), for words > 32

extern "C" __global__ void __launch_bounds__(RESOLVE_THREADS, 1) block_resolve_kernel(const unsigned int* mask, const long long* order, int n, int words,
                                                long long* keep, long long* count_out, long long* host_count) {
    resolve_in_rounds(mask, order, n, words, nullptr, keep, count_out, host_count);
}

// ---------------------------------------------------------------- "streamed": mask and resolve in one launch
// The resolve cannot start before the mask rows of its first rounds exist, but it needs
// the rest only later, and it is one block: the other SMs idle through it. So one launch
// does both: block 0 resolves (resolve_in_rounds, waiting for each round's rows), the
// other blocks make the mask, task t = (row word t / groups, column words STREAM_WARPS *
// (t % groups) ...), dealt in row-major order (block b takes t = b - 1, b - 1 + producers,
// ...), and count each finished task in row_done[row word]. The producers never wait, so
// the launch makes progress whichever blocks are resident; block 0 waits only for them.
// row_done: words counters, 0 at the launch (zeroed once, and by block 0 before it ends);
// one per stream (_cuda.stream_counters), as launches on a stream run one after another.
// Dynamic shared memory: block_resolve_shared_bytes (block 0's; the producers use none).
template <typename T>
__global__ void __launch_bounds__(RESOLVE_THREADS, 1) streamed_resolve_kernel(
        const T* sorted_boxes, const long long* sorted_labels, int n, int words, double iou_threshold,
        unsigned int* mask, unsigned int* row_done, const long long* order, long long* keep, long long* count_out,
        long long* host_count) {
    typedef typename Arith<T>::type A;
    if (blockIdx.x == 0) {  // block-uniform
        resolve_in_rounds(mask, order, n, words, row_done, keep, count_out, host_count);
        return;
    }
    __shared__ Box<A> row_box[32];
    __shared__ A row_area[32];
    __shared__ long long row_label[32];
    const int groups = (words + STREAM_WARPS - 1) / STREAM_WARPS, producers = gridDim.x - 1;
    const long long tasks = (long long)words * groups;
    for (long long t = blockIdx.x - 1; t < tasks; t += producers) {
        const int row_word = int(t / groups), group = int(t % groups);
        if ((group + 1) * STREAM_WARPS <= row_word) continue;  // left of the diagonal: no task (block-uniform)
        mask_tiles<STREAM_WARPS>(sorted_boxes, sorted_labels, n, words, iou_threshold, mask, row_word,
                                 group * STREAM_WARPS, row_box, row_area, row_label);
        __syncthreads();  // every warp's words written; the row boxes free for the next task
        if (threadIdx.x == 0) red_add_release(row_done + row_word, 1u);
    }
}
