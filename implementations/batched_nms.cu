// Batched, class-aware, exact greedy NMS from boxes and scores or from a detector's raw
// head output (batched_nms.py is the host side; implementations/DESIGN.md says why it is
// built this way). Two kernels a batch (three with wide_sort_kernel; one, fused_kernel, for an
// eager call of a small batch), behind one memset of the per-image counters:
//
//   decode_rows_kernel (YOLOv5 heads, single label) or decode_kernel (the rest): decode
//     the boxes, find the rows' candidates (score above the threshold: the best class, or
//     every class with multi-label), and append them to the image's candidate records
//     through a per-image counter. The count goes on past the capacity, so an overflow is
//     seen, never hidden.
//   wide_sort_kernel (only where an image may hold more candidates than a block sorts in
//     shared memory, from batched_nms.WIDE_MIN_CAPACITY): the images that do, sorted by
//     the whole GPU (chunks a block each, then merge passes over every such image at once).
//   fused_kernel (instead of the two others in an eager call, where the decode's grid fits
//     the GPU's SMs at once and no wide_sort_kernel is needed: a batch of one on the usual
//     heads): one launch, each image's last decode block to finish runs its NMS (below).
//   nms_kernel: a block per image. Up to fast_max candidates with float scores (and no
//     pre_nms_top_k cut) take the class-segmented path: the classes grouped by a hash
//     table without a sort where all are small (select_nms), else one sort by (class,
//     score) (segmented_nms); a warp resolving each class (small ones by selection or
//     lazily, large ones from suppression masks within the class), the detections sorted
//     by score. Otherwise: rank its candidates (higher score first, ties by the
//     lower candidate index) by counting (a few), sort them in shared memory, or, beyond
//     what shared memory holds, in sorted chunks merged in global memory (or takes
//     wide_sort_kernel's order); then greedy NMS
//     in rank order, a tile of TILE candidates at a time, against the detections so far
//     (the only boxes that can still matter), and write the padded outputs.
//
// (DECODE_THREADS, DECODE_ROWS_MAX, DECODE_CLASS_LOADS, NMS_THREADS, TILE, KEPT_CACHE,
// COUNT_RANK_MAX, COUNT_SORT_MAX, SELECT_MAX, WIDE_CHUNK and WIDE_SHARE come from
// batched_nms.DEFINES; LAZY_MAX from its tunables.)

#define LAYOUT_SCORES 0  // boxes [B, N, 4] and scores [B, N, C] (C = 1: scores [B, N], labels [B, N] or none)
#define LAYOUT_YOLOV5 1  // raw [B, N, 5 + C]: cx, cy, w, h, objectness, class scores
#define LAYOUT_YOLOV8 2  // raw [B, 4 + C, N]: channels first, no objectness

#define TILE_WORDS (TILE / 32)
#define DECODE_WARPS (DECODE_THREADS / 32)
#define NMS_WARPS (NMS_THREADS / 32)

// A candidate's sort key: a larger key ranks first. Float scores pack the score's order
// key above the complemented candidate index, so keys are unique and their order is the
// rank order outright; double scores need the index as a second key (nms_kernel's
// `ranks_before`). Key 0 is never a candidate's (every candidate's score is above a
// threshold, so not -inf or NaN, whose keys are the lowest and the highest): it pads a sort.
__device__ __forceinline__ unsigned long long candidate_key(float score, int cand) {
    return (score_key(score) << 32) | (unsigned long long)(0xffffffffu - (unsigned int)cand);
}
__device__ __forceinline__ unsigned long long candidate_key(double score, int) { return score_key(score); }

// Score of class c of row i of image b, in the arithmetic type A. YOLOv5's score is
// objectness x class score, as its non_max_suppression multiplies them (in float32 for
// float16 input: the product of two halves is exact there).
template <typename T>
__device__ __forceinline__ typename Arith<T>::type class_score(const T* data, const T* scores, int layout, int b,
                                                               int i, int c, int n, int classes,
                                                               typename Arith<T>::type objectness) {
    if (layout == LAYOUT_SCORES) return load_value(scores, ((long long)b * n + i) * classes + c);
    if (layout == LAYOUT_YOLOV5) return objectness * load_value(data, ((long long)b * n + i) * (5 + classes) + 5 + c);
    return load_value(data, ((long long)b * (4 + classes) + 4 + c) * n + i);
}

// Row i's box as x1, y1, x2, y2 in the arithmetic type. Centre format is converted as
// torchvision's box_convert does (cx - 0.5 * w, ...; --fmad=false keeps it unfused).
template <typename T>
__device__ __forceinline__ Box<typename Arith<T>::type> row_box(const T* data, int layout, int cxcywh, int b, int i,
                                                                int n, int classes) {
    typedef typename Arith<T>::type A;
    A v[4];
    for (int k = 0; k < 4; ++k) {
        if (layout == LAYOUT_SCORES) v[k] = load_value(data, ((long long)b * n + i) * 4 + k);
        else if (layout == LAYOUT_YOLOV5) v[k] = load_value(data, ((long long)b * n + i) * (5 + classes) + k);
        else v[k] = load_value(data, ((long long)b * (4 + classes) + k) * n + i);
    }
    if (!cxcywh) return {v[0], v[1], v[2], v[3]};
    const A half_w = A(0.5) * v[2], half_h = A(0.5) * v[3];
    return {v[0] - half_w, v[1] - half_h, v[0] + half_w, v[1] + half_h};
}

// decode_kernel's block x of rows for images b0, b0 + step, ... below batch: a thread a row
// (DECODE_THREADS rows); a block of more threads (fused_kernel's) leaves the rest idle.
// No barrier: whole warps may leave.
template <typename T>
__device__ __forceinline__ void decode_block(
    int x, int b0, int step, const T* data, const T* scores, const long long* labels, int layout, int cxcywh,
    int batch, int n, int classes, int multi_label, double score_threshold, int capacity, unsigned int* counts,
    unsigned long long* keys, int* cands, long long* cand_classes, typename Arith<T>::type* cand_boxes,
    typename Arith<T>::type* cand_scores) {
    typedef typename Arith<T>::type A;
    if (threadIdx.x >= DECODE_THREADS) return;  // whole warps
    const A threshold = A(score_threshold);  // rounded to the arithmetic type, as torch compares `scores > t`
    const int lane = threadIdx.x % 32;
    const int i = x * DECODE_THREADS + threadIdx.x;
    for (int b = b0; b < batch; b += step) {  // uniform over the warp: every lane reaches the shuffles
        // The row's candidates: with multi-label every class above the threshold, else the
        // best class (the first of equal best scores) if it is above.
        int found = 0, best = -1;
        A best_score = threshold, objectness = A(1);
        bool open = i < n;
        if (open && layout == LAYOUT_YOLOV5) {  // objectness first: a row below it reads no class score
            objectness = load_value(data, ((long long)b * n + i) * (5 + classes) + 4);
            open = objectness > threshold;
        }
        if (open) {
            for (int c = 0; c < classes; ++c) {
                const A s = class_score(data, scores, layout, b, i, c, n, classes, objectness);
                if (multi_label) {
                    found += s > threshold;
                } else if (s > best_score) {
                    best_score = s;
                    best = c;
                }
            }
            if (!multi_label) found = best >= 0;
        }
        // One atomic a warp: an inclusive scan of the lanes' counts places each lane's run.
        int inclusive = found;
        for (int d = 1; d < 32; d <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, inclusive, d);
            if (lane >= d) inclusive += v;
        }
        const int total = __shfl_sync(0xffffffffu, inclusive, 31);
        unsigned int base = 0;
        if (lane == 31 && total > 0) base = atomicAdd(&counts[b], (unsigned int)total);
        base = __shfl_sync(0xffffffffu, base, 31);
        if (found == 0) continue;
        unsigned int slot = base + (unsigned int)(inclusive - found);
        const Box<A> box = row_box(data, layout, cxcywh, b, i, n, classes);
        for (int c = multi_label ? 0 : best; c < (multi_label ? classes : best + 1); ++c) {
            const A s = multi_label ? class_score(data, scores, layout, b, i, c, n, classes, objectness) : best_score;
            if (!(s > threshold)) continue;
            if (slot < (unsigned int)capacity) {
                const long long at = (long long)b * capacity + slot;
                const int cand = multi_label ? i * classes + c : i;
                keys[at] = candidate_key(s, cand);
                cands[at] = cand;
                cand_classes[at] = labels != nullptr ? labels[(long long)b * n + i] : (long long)c;
                cand_boxes[4 * at] = box.x1;
                cand_boxes[4 * at + 1] = box.y1;
                cand_boxes[4 * at + 2] = box.x2;
                cand_boxes[4 * at + 3] = box.y2;
                cand_scores[at] = s;
            }
            ++slot;
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(DECODE_THREADS) decode_kernel(
    const T* data, const T* scores, const long long* labels, int layout, int cxcywh, int batch, int n, int classes,
    int multi_label, double score_threshold, int capacity, unsigned int* counts, unsigned long long* keys, int* cands,
    long long* cand_classes, typename Arith<T>::type* cand_boxes, typename Arith<T>::type* cand_scores) {
    decode_block<T>(blockIdx.x, blockIdx.y, gridDim.y, data, scores, labels, layout, cxcywh, batch, n, classes,
                    multi_label, score_threshold, capacity, counts, keys, cands, cand_classes, cand_boxes, cand_scores);
}

// The best of two (score, class) pairs in every lane of the warp: the higher score, on
// equal scores the lower class; class -1 (nothing above the threshold) loses to any other.
// So the warp picks what a loop over the classes in order picks: the first of equal best.
template <typename A>
__device__ __forceinline__ void warp_best_class(A& best, int& best_class) {
    for (int d = 16; d > 0; d >>= 1) {
        const A other = __shfl_xor_sync(0xffffffffu, best, d);
        const int other_class = __shfl_xor_sync(0xffffffffu, best_class, d);
        if (other_class >= 0 &&
            (best_class < 0 || other > best || (other == best && other_class < best_class))) {
            best = other;
            best_class = other_class;
        }
    }
}

// YOLOv5 heads with a single label: a block takes DECODE_THREADS x rows_per_thread rows of
// an image. (1) Its threads load the rows' objectness, every load in flight at once, and
// the rows above the threshold join the block's list; (2) a warp per listed row (two rows
// at a time) loads its class scores, adjacent classes in adjacent lanes, and a warp
// argmax picks the best; (3) one atomic reserves the block's candidates in the image's
// records, and the block writes them. A thread per row that reads its class scores one
// after another waits on many more memory round trips. Six blocks an SM: the register
// budget (40) at which the float kernels spill nothing.
//
// decode_rows_block is block x's part for images b0, b0 + step, ... below batch, by a block
// of THREADS threads (decode_rows_kernel's DECODE_THREADS, or fused_kernel's NMS_THREADS:
// the same rows, more warps for the class scores); `lists` is shared memory of
// decode_lists_bytes<A>(). Every thread of the block calls it; it ends with a barrier.
template <typename A>
__host__ __device__ constexpr int decode_lists_bytes() {
    return (3 * 4 + (int)sizeof(A)) * DECODE_THREADS * DECODE_ROWS_MAX;
}

template <typename T, int THREADS>
__device__ __forceinline__ void decode_rows_block(
    int x, int b0, int step, const T* data, int batch, int n, int classes, int rows_per_thread,
    double score_threshold, int capacity, unsigned int* counts, unsigned long long* keys, int* cands,
    long long* cand_classes, typename Arith<T>::type* cand_boxes, typename Arith<T>::type* cand_scores,
    unsigned char* lists) {
    typedef typename Arith<T>::type A;
    constexpr int WARPS = THREADS / 32;
    constexpr int LISTED_MAX = DECODE_THREADS * DECODE_ROWS_MAX;
    A* s_found_score = (A*)lists;  // rows with a candidate: its score, row and class
    int* s_found_row = (int*)(lists + sizeof(A) * LISTED_MAX);
    int* s_found_class = s_found_row + LISTED_MAX;
    int* s_rows = s_found_class + LISTED_MAX;  // rows above the objectness threshold
    __shared__ int s_listed, s_found;
    __shared__ unsigned int s_base;
    const A threshold = A(score_threshold);  // rounded to the arithmetic type, as torch compares `scores > t`
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const long long stride = 5 + classes;
    const int rows = DECODE_THREADS * rows_per_thread;  // the block's
    const int first = x * rows;
    constexpr int LOADS = (LISTED_MAX + THREADS - 1) / THREADS;  // a thread's objectness loads at most
    for (int b = b0; b < batch; b += step) {  // uniform over the block: every thread reaches the barriers
        const long long image = (long long)b * n;
        if (tid == 0) {
            s_listed = 0;
            s_found = 0;
        }
        __syncthreads();
        // (1) objectness first: a row below it reads no class score
        A objectness[LOADS];
#pragma unroll
        for (int k = 0; k < LOADS; ++k) {
            const int r = k * THREADS + tid, i = first + r;
            objectness[k] = r < rows && i < n ? load_value(data, (image + i) * stride + 4) : A(0);
        }
#pragma unroll
        for (int k = 0; k < LOADS; ++k) {
            const int r = k * THREADS + tid, i = first + r;
            const bool open = r < rows && i < n && objectness[k] > threshold;
            const unsigned int ballot = __ballot_sync(0xffffffffu, open);
            int base = 0;
            if (lane == 0 && ballot != 0u) base = atomicAdd(&s_listed, __popc(ballot));
            base = __shfl_sync(0xffffffffu, base, 0);
            if (open) s_rows[base + __popc(ballot & ((1u << lane) - 1u))] = i;
        }
        __syncthreads();
        // (2) the listed rows' best classes, a warp a row
        const int listed = s_listed;
        for (int p = warp; p < listed; p += 2 * WARPS) {
            const bool second = p + WARPS < listed;  // uniform over the warp
            const int row0 = s_rows[p], row1 = second ? s_rows[p + WARPS] : row0;
            const long long at0 = (image + row0) * stride, at1 = (image + row1) * stride;
            const A objectness0 = load_value(data, at0 + 4), objectness1 = load_value(data, at1 + 4);
            A best0 = threshold, best1 = threshold;
            int class0 = -1, class1 = -1;
            for (int c0 = 0; c0 < classes; c0 += 32 * DECODE_CLASS_LOADS) {
                A v0[DECODE_CLASS_LOADS], v1[DECODE_CLASS_LOADS];
#pragma unroll
                for (int k = 0; k < DECODE_CLASS_LOADS; ++k) {  // every load in flight before the first compare
                    const int c = c0 + 32 * k + lane;
                    v0[k] = c < classes ? load_value(data, at0 + 5 + c) : A(0);
                    v1[k] = c < classes ? load_value(data, at1 + 5 + c) : A(0);
                }
#pragma unroll
                for (int k = 0; k < DECODE_CLASS_LOADS; ++k) {  // a lane's classes in increasing order
                    const int c = c0 + 32 * k + lane;
                    if (c < classes) {
                        const A s0 = objectness0 * v0[k], s1 = objectness1 * v1[k];
                        if (s0 > best0) {
                            best0 = s0;
                            class0 = c;
                        }
                        if (s1 > best1) {
                            best1 = s1;
                            class1 = c;
                        }
                    }
                }
            }
            warp_best_class(best0, class0);
            warp_best_class(best1, class1);
            if (lane == 0 && class0 >= 0) {
                const int f = atomicAdd(&s_found, 1);
                s_found_row[f] = row0;
                s_found_class[f] = class0;
                s_found_score[f] = best0;
            }
            if (lane == 0 && second && class1 >= 0) {
                const int f = atomicAdd(&s_found, 1);
                s_found_row[f] = row1;
                s_found_class[f] = class1;
                s_found_score[f] = best1;
            }
        }
        __syncthreads();
        // (3) the block's candidates into the image's records
        const int found = s_found;
        if (tid == 0 && found > 0) s_base = atomicAdd(&counts[b], (unsigned int)found);
        __syncthreads();
        if (found > 0) {
            const unsigned int base = s_base;
            for (int f = tid; f < found; f += THREADS) {
                const unsigned int slot = base + (unsigned int)f;
                if (slot >= (unsigned int)capacity) continue;  // counted, not stored: the overflow
                const int i = s_found_row[f];
                const A s = s_found_score[f];
                const Box<A> box = row_box(data, LAYOUT_YOLOV5, 1, b, i, n, classes);
                const long long at = (long long)b * capacity + slot;
                keys[at] = candidate_key(s, i);
                cands[at] = i;
                cand_classes[at] = s_found_class[f];
                cand_boxes[4 * at] = box.x1;
                cand_boxes[4 * at + 1] = box.y1;
                cand_boxes[4 * at + 2] = box.x2;
                cand_boxes[4 * at + 3] = box.y2;
                cand_scores[at] = s;
            }
        }
        __syncthreads();  // the lists are refilled for the next image
    }
}

template <typename T>
__global__ void __launch_bounds__(DECODE_THREADS, 6) decode_rows_kernel(
    const T* data, int batch, int n, int classes, int rows_per_thread, double score_threshold, int capacity,
    unsigned int* counts, unsigned long long* keys, int* cands, long long* cand_classes,
    typename Arith<T>::type* cand_boxes, typename Arith<T>::type* cand_scores) {
    __shared__ __align__(16) unsigned char lists[decode_lists_bytes<typename Arith<T>::type>()];
    decode_rows_block<T, DECODE_THREADS>(blockIdx.x, blockIdx.y, gridDim.y, data, batch, n, classes, rows_per_thread,
                                         score_threshold, capacity, counts, keys, cands, cand_classes, cand_boxes,
                                         cand_scores, lists);
}

// The rank order of two sort entries (key, slot): a larger key first; equal keys (double
// scores only, or two padding entries) by the lower candidate index.
__device__ __forceinline__ bool ranks_before(unsigned long long key_a, unsigned int slot_a, unsigned long long key_b,
                                             unsigned int slot_b, const int* cands) {
    if (key_a != key_b) return key_a > key_b;
    if (key_a == 0ull) return false;
    return cands[slot_a] < cands[slot_b];
}

// Bitonic sort of p (a power of two) entries in shared memory into rank order; the whole
// block calls it.
__device__ void bitonic_sort(unsigned long long* keys, unsigned int* slots, int p, const int* cands) {
    for (int k = 2; k <= p; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < p / 2; t += NMS_THREADS) {
                const int lo = (t / j) * 2 * j + t % j, hi = lo + j;
                const unsigned long long key_lo = keys[lo], key_hi = keys[hi];
                const unsigned int slot_lo = slots[lo], slot_hi = slots[hi];
                const bool ascending = (lo & k) == 0;  // this run in rank order, the other reversed
                const bool swap = ascending ? ranks_before(key_hi, slot_hi, key_lo, slot_lo, cands)
                                            : ranks_before(key_lo, slot_lo, key_hi, slot_hi, cands);
                if (swap) {
                    keys[lo] = key_hi;
                    keys[hi] = key_lo;
                    slots[lo] = slot_hi;
                    slots[hi] = slot_lo;
                }
            }
            __syncthreads();
        }
    }
}

// Output entries [begin, end) of the merge of two sorted runs in global memory, src -> dst
// (run a: len_a entries at lo, run b: len_b entries after it): a binary search finds how
// many of the first `begin` outputs come from run a (merge path), then a plain merge.
__device__ void merge_share(const unsigned long long* src_keys, const unsigned int* src_slots,
                            unsigned long long* dst_keys, unsigned int* dst_slots, int lo, int len_a, int len_b,
                            int begin, int end, const int* cands) {
    const unsigned long long* key_a = src_keys + lo;
    const unsigned int* slot_a = src_slots + lo;
    const unsigned long long* key_b = key_a + len_a;
    const unsigned int* slot_b = slot_a + len_a;
    int first = max(0, begin - len_b), last = min(begin, len_a);  // entries of run a among the first `begin`
    while (first < last) {
        const int take = (first + last) / 2, other = begin - take - 1;
        if (ranks_before(key_a[take], slot_a[take], key_b[other], slot_b[other], cands)) first = take + 1;
        else last = take;
    }
    int a = first, bb = begin - first;
    for (int out = begin; out < end; ++out) {
        const bool from_a = bb >= len_b || (a < len_a && ranks_before(key_a[a], slot_a[a], key_b[bb], slot_b[bb],
                                                                         cands));
        dst_keys[lo + out] = from_a ? key_a[a] : key_b[bb];
        dst_slots[lo + out] = from_a ? slot_a[a] : slot_b[bb];
        from_a ? ++a : ++bb;
    }
}

// One merge pass over runs of `width` sorted entries (global memory), src -> dst: each
// pair of runs is merged by the whole block, each thread merging a share of the output.
__device__ void merge_pass(const unsigned long long* src_keys, const unsigned int* src_slots,
                           unsigned long long* dst_keys, unsigned int* dst_slots, int n, int width, const int* cands) {
    for (int lo = 0; lo < n; lo += 2 * width) {
        const int mid = min(lo + width, n), hi = min(lo + 2 * width, n), len = hi - lo;
        const int share = (len + NMS_THREADS - 1) / NMS_THREADS;
        const int begin = min(len, (int)threadIdx.x * share), end = min(len, begin + share);
        if (begin < end)
            merge_share(src_keys, src_slots, dst_keys, dst_slots, lo, mid - lo, hi - mid, begin, end, cands);
    }
}

// Whether two candidates' classes make them compete (class_agnostic: every pair does).
__device__ __forceinline__ bool same_group(long long class_a, long long class_b, int class_agnostic) {
    return class_agnostic || class_a == class_b;
}

// An image's candidates, as nms_kernel counts them: none where its buffer overflowed.
__device__ __forceinline__ int image_candidates(const unsigned int* counts, int b, int capacity) {
    const unsigned int count = counts[b];
    return count > (unsigned int)capacity ? 0 : (int)count;
}

// How many merge passes of the whole-GPU sort leave an image's n candidates in one run,
// so which of its two buffers holds the result (an even count: the first).
__device__ __forceinline__ int wide_passes(int n) {
    int passes = 0;
    for (int width = WIDE_CHUNK; width < n; width *= 2) ++passes;
    return passes;
}

// The whole-GPU sort's result for an image of n candidates (records from `image`): the one
// of its two buffers (at buffers + 2 * image) that wide_passes says.
template <typename P>
__device__ __forceinline__ P* wide_sorted(P* buffers, long long image, int capacity, int n) {
    return buffers + 2 * image + (wide_passes(n) % 2 == 0 ? 0 : capacity);
}

// ------------------------------------------------------------------ the whole-GPU pass
// wide_sort_kernel: the images with more than `wide_min` candidates, on the whole GPU rather
// than their one block of nms_kernel (launched cooperatively: every block resident; its
// grid barriers use a zeroed word of the call's scratch). Which images, how many passes and
// rounds depend only on the counts and the states, which every block reads alike.
//
// (1) The rank sort (wide_sort): chunks of WIDE_CHUNK entries, a block a chunk, sorted in
//     shared memory into the first of the image's two buffers (out + 2 * image: the block
//     path's merge buffers), then merge passes over every such image at once, every thread
//     of the grid merging shares of WIDE_SHARE outputs, a grid barrier after each.
//     nms_kernel takes the order from the buffer wide_passes says.
// (2) With `graph` (many detections wanted), greedy NMS on the overlap graph rather than
//     nms_kernel's tests of each candidate against every detection so far. The candidates
//     are binned by size class (their width against the image's widest) and, within a
//     class, by column of x1 (columns as wide as the class's widest box), and sorted the
//     same way by (class, column, y1), so that the boxes of a class that can intersect a
//     box lie in a few runs of that order. Each candidate's row, its highest-ranked
//     WIDE_ROW_SLOTS higher neighbours (same group, IoU above the threshold), is found
//     once; then rounds over the whole grid (the overlap graph's greedy rounds): an
//     undecided candidate with a kept higher neighbour is removed, one whose higher
//     neighbours are all removed is kept (a longer row than its slots is searched again
//     where the stored ones are all removed). Both decisions are final and the
//     definition's, so a neighbour decided in the same round or not yet is safe to read
//     either way, and each round decides at least the highest-ranked undecided candidate.
//     nms_kernel then writes the kept ones in rank order (the per-class cap and max_output
//     as ever). Candidates past top_k take no part.

#define STATE_UNDECIDED 0
#define STATE_KEPT 1
#define STATE_REMOVED 2

// The first of `n` entries (keys descending) whose key is at most `key`.
__device__ __forceinline__ int first_at_most(const unsigned long long* keys, int n, unsigned long long key) {
    int first = 0, last = n;
    while (first < last) {
        const int mid = (first + last) / 2;
        if (keys[mid] > key) first = mid + 1;
        else last = mid;
    }
    return first;
}

// (1) above: each image with more than wide_min candidates sorted into rank order (for the
// x-sort, the order of its keys), entries read from in + b * in_stride (slot s at [s]).
__device__ void wide_sort(const unsigned int* counts, const unsigned long long* in, long long in_stride,
                          const int* cands, int batch, int capacity, int wide_min, int longest,
                          unsigned long long* out_keys, unsigned int* out_slots, unsigned int* barrier,
                          unsigned long long* s_keys, unsigned int* s_slots) {
    const int chunks = (capacity + WIDE_CHUNK - 1) / WIDE_CHUNK;  // an image's most
    for (long long task = blockIdx.x; task < (long long)batch * chunks; task += gridDim.x) {
        const int b = int(task / chunks), base = int(task % chunks) * WIDE_CHUNK;
        const int n = image_candidates(counts, b, capacity);
        if (n <= wide_min || base >= n) continue;  // the same for the whole block
        const long long image = (long long)b * capacity;
        const int m = min(WIDE_CHUNK, n - base);
        int p = 1;
        while (p < m) p <<= 1;
        for (int t = threadIdx.x; t < p; t += NMS_THREADS) {
            s_keys[t] = t < m ? in[b * in_stride + base + t] : 0ull;
            s_slots[t] = base + t;
        }
        __syncthreads();
        bitonic_sort(s_keys, s_slots, p, cands + image);
        for (int t = threadIdx.x; t < m; t += NMS_THREADS) {
            out_keys[2 * image + base + t] = s_keys[t];
            out_slots[2 * image + base + t] = s_slots[t];
        }
        __syncthreads();  // before the next chunk refills the shared buffers
    }
    grid_barrier(barrier);
    const long long thread = (long long)blockIdx.x * NMS_THREADS + threadIdx.x;
    const long long threads = (long long)gridDim.x * NMS_THREADS;
    int pass = 0;
    for (int width = WIDE_CHUNK; width < longest; width *= 2, ++pass) {
        const int pairs = (capacity + 2 * width - 1) / (2 * width), shares = 2 * width / WIDE_SHARE;
        const long long tasks = (long long)batch * pairs * shares;
        for (long long task = thread; task < tasks; task += threads) {
            const int b = int(task / ((long long)pairs * shares)), within = int(task % ((long long)pairs * shares));
            const int n = image_candidates(counts, b, capacity);
            const int lo = within / shares * 2 * width, begin = within % shares * WIDE_SHARE;
            if (n <= wide_min || width >= n || lo >= n) continue;  // done, or no pass of this image
            const int mid = min(lo + width, n), hi = min(lo + 2 * width, n), len = hi - lo;
            if (begin >= len) continue;
            const long long image = (long long)b * capacity;
            unsigned long long* const keys_0 = out_keys + 2 * image;
            unsigned int* const slots_0 = out_slots + 2 * image;
            if (pass % 2 == 0)
                merge_share(keys_0, slots_0, keys_0 + capacity, slots_0 + capacity, lo, mid - lo, hi - mid, begin,
                            min(len, begin + WIDE_SHARE), cands + image);
            else
                merge_share(keys_0 + capacity, slots_0 + capacity, keys_0, slots_0, lo, mid - lo, hi - mid, begin,
                            min(len, begin + WIDE_SHARE), cands + image);
        }
        grid_barrier(barrier);
    }
}

// A box's size class in the overlap graph: floor(log2(widest / its width)), at most
// WIDE_SIZE_CLASSES - 1; WIDE_SIZE_CLASSES for a box that intersects nothing (a NaN, or no
// width or height: an intersection needs both above 0). By size so that a few wide boxes
// do not widen every candidate's search: each class is searched with its own extents.
template <typename A>
__device__ __forceinline__ int size_class_of(const Box<A>& box, double widest) {
    if (!(box.x2 > box.x1 && box.y2 > box.y1)) return WIDE_SIZE_CLASSES;
    const double ratio = widest / (double(box.x2) - double(box.x1));
    if (!(ratio >= 2.0)) return 0;  // below 2, or NaN (infinite widths): the first class
    return min(ilogb(ratio), WIDE_SIZE_CLASSES - 1);
}

// An image's extents, a row of 1 + WIDE_EXTENTS * WIDE_SIZE_CLASSES 64-bit words (WIDE_EXTENTS
// = 5): the widest box, then per size class its widest box, tallest box, largest area
// (doubles as order_key), smallest x1 (the complemented key: a minimum by atomicMax)
// and count.
#define WIDE_MAX_COLUMNS 64  // a search of more columns reads the whole class instead

// A class's column of x1 (columns as wide as the class's widest box, from its smallest x1),
// in double and clamped into 24 bits before any conversion to an integer: monotone in x1.
__device__ __forceinline__ int column_of(double x1, double x0, double side) {
    const double c = floor((x1 - x0) / side);
    return !(c > 0.0) ? 0 : (c >= 16777215.0 ? 16777215 : int(c));
}

// The overlap graph's sort key: classes in order, in a class columns in order, in a column
// a larger key for a smaller y1 (the sorts put larger keys first); y1 rounded to float (the
// searches' bounds round outwards). Never 0, which pads a sort.
__device__ __forceinline__ unsigned long long cell_key(int size_class, int column, float y) {
    const unsigned int bits = __float_as_uint(y);
    const unsigned int order = bits >> 31 ? ~bits : bits | 0x80000000u;  // unsigned order = float order
    return (unsigned long long)(255 - size_class) << 56 | (unsigned long long)(16777215 - column) << 32 | ~order;
}

// Candidate `slot` of image b's higher-ranked neighbours: the candidates of its group
// ranked before it whose IoU with it is above the threshold; visit(row) for each until it
// returns true. In each size class whose largest area can reach the threshold (IoU is at
// most the smaller area over the larger), the columns that x1 in [its x1 - the class's
// widest box, its x2] covers, and in each column y1 in [its y1 - the class's tallest box,
// its y2] (margins for the double arithmetic, float bounds rounded outwards): every box of
// the class that can intersect it. A box that intersects nothing has none.
template <typename T, typename Visit>
__device__ __forceinline__ void higher_neighbours(int b, int slot, int n, int capacity, const long long* cand_classes,
                                                  const typename Arith<T>::type* cand_boxes, int class_agnostic,
                                                  const IouThreshold& threshold, const int* rank_of,
                                                  const unsigned long long* cell_keys, const unsigned int* cell_slots,
                                                  const unsigned long long* extents, Visit visit) {
    typedef typename Arith<T>::type A;
    const long long image = (long long)b * capacity, row = image + slot;
    const Box<A> box = load_box(cand_boxes, row);
    if (size_class_of(box, 0.0) == WIDE_SIZE_CLASSES) return;
    const A area = box_area(box);
    const long long cls = cand_classes[row];
    const int rank = rank_of[row];
    const unsigned long long* const keys = wide_sorted(cell_keys, image, capacity, n);
    const unsigned int* const slots = wide_sorted(cell_slots, image, capacity, n);
    const unsigned long long* const extent = extents + b * (1 + WIDE_EXTENTS * WIDE_SIZE_CLASSES);
    const double x1 = double(box.x1), y1 = double(box.y1);
    const double reach = threshold.exact * (double(box.x2) - x1) * (double(box.y2) - y1) * (1.0 - 1e-5);
    const float to_y = __double2float_ru(double(box.y2));
    int first = 0;  // the class's first position in the cell order
    for (int k = 0; k < WIDE_SIZE_CLASSES; ++k) {
        const unsigned long long* const e = extent + 1 + WIDE_EXTENTS * k;
        const int members = int(e[4]);
        const int begin = first;
        first += members;
        if (members == 0 || key_value(e[2]) < reach) continue;  // empty, or no box large enough
        const double widest = key_value(e[0]), tallest = key_value(e[1]);
        const double x0 = key_value(~e[3]);
        const double from_x = x1 - widest - (fabs(x1) + widest) * 1e-9;
        const double from_y = y1 - tallest - (fabs(y1) + tallest) * 1e-9;
        const float from_yf = from_y == from_y ? __double2float_rd(from_y) : -infinity(0.0f);
        const int first_column = from_x == from_x ? column_of(from_x, x0, widest) : 0;
        const int last_column = column_of(double(box.x2), x0, widest);
        const bool all = last_column - first_column >= WIDE_MAX_COLUMNS;  // a box far wider: the whole class
        for (int column = first_column; column <= (all ? first_column : last_column); ++column) {
            const int lo = all ? begin : begin + first_at_most(keys + begin, members, cell_key(k, column, from_yf));
            const int hi = all ? first : begin + first_at_most(keys + begin, members, cell_key(k, column, to_y) - 1);
            for (int q = lo; q < hi; ++q) {
                const long long other_row = image + slots[q];
                if (rank_of[other_row] >= rank || !same_group(cand_classes[other_row], cls, class_agnostic))
                    continue;
                const Box<A> higher = load_box(cand_boxes, other_row);
                if (overlaps_decisive(higher, box_area(higher), box, area, threshold) && visit(other_row)) return;
            }
        }
    }
}

// f(b, i, n, image) for each record i < n of each image b with n > wide_min candidates (its
// records from `image`), the records spread over the whole grid.
template <typename F>
__device__ __forceinline__ void each_wide_record(const unsigned int* counts, int batch, int capacity, int wide_min,
                                                 F f) {
    const long long threads = (long long)gridDim.x * NMS_THREADS;
    for (long long task = (long long)blockIdx.x * NMS_THREADS + threadIdx.x; task < (long long)batch * capacity;
         task += threads) {
        const int b = int(task / capacity), i = int(task % capacity);
        const int n = image_candidates(counts, b, capacity);
        if (n > wide_min && i < n) f(b, i, n, (long long)b * capacity);
    }
}

template <typename T>
__global__ void __launch_bounds__(NMS_THREADS) wide_sort_kernel(
    const unsigned int* counts, const unsigned long long* keys, const int* cands, const long long* cand_classes,
    const typename Arith<T>::type* cand_boxes, int batch, int capacity, int wide_min, int graph, int class_agnostic,
    double iou_threshold, int top_k, unsigned long long* sort_keys, unsigned int* sort_slots, int* rank_of,
    int* state, unsigned long long* cell_keys, unsigned int* cell_slots, unsigned long long* extents, int* rows,
    int* row_lengths, unsigned int* barrier) {
    typedef typename Arith<T>::type A;
    __shared__ unsigned long long s_keys[WIDE_CHUNK];
    __shared__ unsigned int s_slots[WIDE_CHUNK];
    const long long thread = (long long)blockIdx.x * NMS_THREADS + threadIdx.x;
    const long long threads = (long long)gridDim.x * NMS_THREADS;
    // the most candidates of an image it takes: every block finds the same, and with none
    // they all return before any grid barrier
    __shared__ int s_longest;
    if (threadIdx.x == 0) s_longest = 0;
    __syncthreads();
    for (int b = threadIdx.x; b < batch; b += NMS_THREADS) {
        const int n = image_candidates(counts, b, capacity);
        if (n > wide_min) atomicMax(&s_longest, n);
    }
    __syncthreads();
    const int longest = s_longest;
    if (longest == 0) return;
    const int per_image = 1 + WIDE_EXTENTS * WIDE_SIZE_CLASSES;
    if (graph)  // zeroed here, first added to after the rank sort's barriers
        for (long long e = thread; e < (long long)batch * per_image; e += threads) extents[e] = 0ull;
    wide_sort(counts, keys, capacity, cands, batch, capacity, wide_min, longest, sort_keys, sort_slots, barrier, s_keys,
              s_slots);
    if (!graph) return;
    // (a) each candidate's rank, its state undecided, the image's widest box that can intersect
    each_wide_record(counts, batch, capacity, wide_min, [&](int b, int r, int n, long long image) {
        const long long row = image + wide_sorted(sort_slots, image, capacity, n)[r];
        rank_of[row] = r;
        state[row] = STATE_UNDECIDED;
        const Box<A> box = load_box(cand_boxes, row);
        if (size_class_of(box, 0.0) < WIDE_SIZE_CLASSES)
            atomicMax(extents + b * per_image, order_key(double(box.x2) - double(box.x1)));
    });
    grid_barrier(barrier);
    // (b) each size class's extents (the boxes of no class intersect nothing)
    each_wide_record(counts, batch, capacity, wide_min, [&](int b, int slot, int n, long long image) {
        const long long row = image + slot;
        const Box<A> box = load_box(cand_boxes, row);
        unsigned long long* const extent = extents + b * per_image;
        const int k = size_class_of(box, key_value(extent[0]));
        if (k == WIDE_SIZE_CLASSES) return;
        unsigned long long* const e = extent + 1 + WIDE_EXTENTS * k;
        const double w = double(box.x2) - double(box.x1), h = double(box.y2) - double(box.y1);
        atomicMax(e, order_key(w));
        atomicMax(e + 1, order_key(h));
        atomicMax(e + 2, order_key(w * h));
        atomicMax(e + 3, ~order_key(double(box.x1)));
        atomicAdd(e + 4, 1ull);
    });
    grid_barrier(barrier);
    // (c) each candidate's cell key (class, column, y1), the sort's input in the second buffer
    each_wide_record(counts, batch, capacity, wide_min, [&](int b, int slot, int n, long long image) {
        const long long row = image + slot;
        const Box<A> box = load_box(cand_boxes, row);
        const unsigned long long* const extent = extents + b * per_image;
        const int k = size_class_of(box, key_value(extent[0]));
        const unsigned long long* const e = extent + 1 + WIDE_EXTENTS * min(k, WIDE_SIZE_CLASSES - 1);
        const int column = k == WIDE_SIZE_CLASSES ? 0 : column_of(double(box.x1), key_value(~e[3]), key_value(e[0]));
        cell_keys[2 * image + capacity + slot] = cell_key(k, column, float(box.y1));
    });
    grid_barrier(barrier);
    wide_sort(counts, cell_keys + capacity, 2ll * capacity, cands, batch, capacity, wide_min, longest, cell_keys,
              cell_slots, barrier, s_keys, s_slots);
    // (d) each candidate's row: its WIDE_ROW_SLOTS highest-ranked higher neighbours (same group,
    // IoU above the threshold) and how many it has in all (more than WIDE_ROW_SLOTS: found
    // again by a search in a round where the stored ones are all removed)
    const IouThreshold threshold(iou_threshold);
    each_wide_record(counts, batch, capacity, wide_min, [&](int b, int slot, int n, long long image) {
        const long long row = image + slot;
        if (rank_of[row] >= top_k) return;  // past the cut: no candidate
        int stored[WIDE_ROW_SLOTS], stored_rank[WIDE_ROW_SLOTS];
        int length = 0, lowest = 0;  // lowest: the stored entry ranked last, once full
        higher_neighbours<T>(b, slot, n, capacity, cand_classes, cand_boxes, class_agnostic, threshold, rank_of,
                             cell_keys, cell_slots, extents, [&](long long other_row) {
                                 const int other_rank = rank_of[other_row];
                                 if (length < WIDE_ROW_SLOTS) {
                                     stored[length] = int(other_row - image);
                                     stored_rank[length] = other_rank;
                                 } else if (other_rank < stored_rank[lowest]) {
                                     stored[lowest] = int(other_row - image);
                                     stored_rank[lowest] = other_rank;
                                 }
                                 if (++length >= WIDE_ROW_SLOTS)
                                     for (int e = 0; e < WIDE_ROW_SLOTS; ++e)
                                         if (stored_rank[e] > stored_rank[lowest]) lowest = e;
                                 return false;
                             });
        for (int e = 0; e < min(length, WIDE_ROW_SLOTS); ++e) rows[row * WIDE_ROW_SLOTS + e] = stored[e];
        row_lengths[row] = length;
    });
    grid_barrier(barrier);
    // (e) the rounds
    unsigned int* const counters = barrier + 1;  // three words: round r's undecided in counters[r % 3]
    for (int round = 0;; ++round) {
        if (thread == 0) counters[(round + 1) % 3] = 0u;  // last read two rounds ago
        int undecided = 0;
        each_wide_record(counts, batch, capacity, wide_min, [&](int b, int slot, int n, long long image) {
            const long long row = image + slot;
            if (__ldcg(state + row) != STATE_UNDECIDED || rank_of[row] >= top_k) return;
            bool kept_neighbour = false, pending = false;
            const auto visit = [&](long long other_row) {
                const int other_state = __ldcg(state + other_row);
                kept_neighbour = other_state == STATE_KEPT;
                pending = pending || other_state == STATE_UNDECIDED;
                return kept_neighbour;
            };
            const int length = row_lengths[row];
            for (int e = 0; e < min(length, WIDE_ROW_SLOTS) && !visit(image + rows[row * WIDE_ROW_SLOTS + e]); ++e) {
            }
            if (length > WIDE_ROW_SLOTS && !kept_neighbour && !pending)  // the stored ones all removed: the rest
                higher_neighbours<T>(b, slot, n, capacity, cand_classes, cand_boxes, class_agnostic, threshold,
                                     rank_of, cell_keys, cell_slots, extents, visit);
            if (kept_neighbour) __stcg(state + row, STATE_REMOVED);
            else if (!pending) __stcg(state + row, STATE_KEPT);
            else ++undecided;
        });
        undecided = warp_sum(undecided);
        if (threadIdx.x % 32 == 0 && undecided != 0) atomicAdd(counters + round % 3, unsigned(undecided));
        grid_barrier(barrier);
        if (__ldcg(counters + round % 3) == 0u) break;  // the same in every block
    }
}


// Dynamic shared memory, carved in this order, each part rounded up to 16 bytes
// (batched_nms.nms_shared_bytes computes the same total).
__device__ __forceinline__ unsigned char* carve(unsigned char*& at, size_t bytes) {
    unsigned char* p = at;
    at += (bytes + 15) / 16 * 16;
    return p;
}

// Detection `out` (image b's o-th: b * max_output + o): its box, score and class, and its
// index, the input row of candidate `cand` (a row gives one candidate per class where
// multi_label).
template <typename T, typename A>
__device__ __forceinline__ void write_detection(long long out, const Box<A>& box, A score, long long cls, int cand,
                                                int multi_label, int classes, T* out_boxes, T* out_scores,
                                                long long* out_classes, long long* out_indices) {
    store_value(out_boxes, 4 * out, box.x1);
    store_value(out_boxes, 4 * out + 1, box.y1);
    store_value(out_boxes, 4 * out + 2, box.x2);
    store_value(out_boxes, 4 * out + 3, box.y2);
    store_value(out_scores, out, score);
    out_classes[out] = cls;
    out_indices[out] = multi_label ? cand / classes : cand;
}

// Image b's detections from `first` to max_output are padding: boxes and scores 0, classes
// and indices -1 (the block's threads share them).
template <typename T>
__device__ __forceinline__ void pad_detections(int b, int first, int max_output, T* out_boxes, T* out_scores,
                                               long long* out_classes, long long* out_indices) {
    typedef typename Arith<T>::type A;
    for (int o = first + (int)threadIdx.x; o < max_output; o += NMS_THREADS) {
        const long long out = (long long)b * max_output + o;
        for (int k = 0; k < 4; ++k) store_value(out_boxes, 4 * out + k, A(0));
        store_value(out_scores, out, A(0));
        out_classes[out] = -1;
        out_indices[out] = -1;
    }
}

// ------------------------------------------------------------------ the class-segmented path
#include "batched_nms_segmented.cuh"  // select_nms, segmented_nms and the block-wide sort it uses

// nms_kernel's work for image b (its block's), also fused_kernel's last block of an image.
// Every thread of the block calls it.
template <typename T>
__device__ __forceinline__ void nms_image(
    int b, unsigned int* counts, const unsigned long long* keys, const int* cands, const long long* cand_classes,
    const typename Arith<T>::type* cand_boxes, const typename Arith<T>::type* cand_scores, int capacity,
    int sort_capacity, int fast_max, int wide_min, int graph, unsigned long long* sort_keys,
    unsigned int* sort_slots, const int* state,
    typename Arith<T>::type* spill_boxes, long long* spill_classes, int classes, int multi_label, int class_agnostic,
    double iou_threshold, int max_output, int max_per_class, int top_k, long long* num_detections, T* out_boxes,
    T* out_scores, long long* out_classes, long long* out_indices, unsigned char* overflow, long long* num_candidates) {
    typedef typename Arith<T>::type A;
    extern __shared__ __align__(16) unsigned char shared[];
    unsigned char* at = shared;
    unsigned long long* s_keys = (unsigned long long*)carve(at, 8ull * sort_capacity);
    unsigned int* s_slots = (unsigned int*)carve(at, 4ull * sort_capacity);
    Box<A>* t_box = (Box<A>*)carve(at, sizeof(Box<A>) * TILE);
    A* t_area = (A*)carve(at, sizeof(A) * TILE);
    long long* t_class = (long long*)carve(at, 8 * TILE);
    unsigned int* t_slot = (unsigned int*)carve(at, 4 * TILE);
    unsigned int* t_mask = (unsigned int*)carve(at, 4 * TILE * TILE_WORDS);
    int* t_keep = (int*)carve(at, 4 * TILE);
    unsigned int* t_dead = (unsigned int*)carve(at, 4 * TILE_WORDS);
    unsigned int* t_output = (unsigned int*)carve(at, 4 * TILE_WORDS);
    Box<A>* k_box = (Box<A>*)carve(at, sizeof(Box<A>) * KEPT_CACHE);
    A* k_area = (A*)carve(at, sizeof(A) * KEPT_CACHE);
    long long* k_class = (long long*)carve(at, 8 * KEPT_CACHE);
    __shared__ int s_count, s_out, s_keeps;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const long long image = (long long)b * capacity;
    const int* image_cands = cands + image;
    if (tid == 0) {
        const unsigned int count = counts[b];
        counts[b] = 0u;  // zeroed for the next call that keeps this scratch (batched_nms.py, _kept_scratch)
        num_candidates[b] = count;
        overflow[b] = count > (unsigned int)capacity;
        s_count = count > (unsigned int)capacity ? 0 : (int)count;  // an overflowing image gives no detections
        s_out = 0;
    }
    __syncthreads();
    const int n = s_count;
    if constexpr (sizeof(A) == 4) {  // float scores: keys of 32 bits leave room for the class
        if (n <= fast_max && top_k >= n) {
            if (select_nms<T>(b, n, fast_max, keys, cands, cand_classes, cand_boxes, cand_scores, capacity, classes,
                              multi_label, class_agnostic, iou_threshold, max_output, max_per_class, num_detections,
                              out_boxes, out_scores, out_classes, out_indices))
                return;
            __syncthreads();
            if (segmented_nms<T>(b, n, fast_max, keys, cands, cand_classes, cand_boxes, cand_scores, capacity, classes,
                                 multi_label, class_agnostic, iou_threshold, max_output, max_per_class, num_detections,
                                 out_boxes, out_scores, out_classes, out_indices))
                return;
            __syncthreads();
        }
    }

    // Rank order: `order` lists the image's record slots by rank.
    const unsigned int* order = s_slots;
    const bool wide = n > wide_min;  // sorted by wide_sort_kernel (and, with graph, resolved by it)
    const bool resolved = wide && graph;
    if (wide) {
        order = wide_sorted(sort_slots, image, capacity, n);
    } else if (n <= COUNT_RANK_MAX && n <= sort_capacity) {  // a thread a candidate counts those before it: two barriers
        for (int t = tid; t < n; t += NMS_THREADS) s_keys[t] = keys[image + t];
        __syncthreads();
        if (tid < n) {
            const unsigned long long key = s_keys[tid];
            int rank = 0;
            for (int j = 0; j < n; ++j) rank += ranks_before(s_keys[j], j, key, tid, image_cands);
            s_slots[rank] = tid;
        }
        __syncthreads();
    } else if (n <= sort_capacity) {
        int p = 1;
        while (p < n) p <<= 1;
        for (int t = tid; t < p; t += NMS_THREADS) {
            s_keys[t] = t < n ? keys[image + t] : 0ull;
            s_slots[t] = t;
        }
        __syncthreads();
        bitonic_sort(s_keys, s_slots, p, image_cands);
    } else {  // sorted chunks of sort_capacity, then merged in global memory
        unsigned long long* const keys_0 = sort_keys + 2 * image;
        unsigned long long* const keys_1 = keys_0 + capacity;
        unsigned int* const slots_0 = sort_slots + 2 * image;
        unsigned int* const slots_1 = slots_0 + capacity;
        for (int base = 0; base < n; base += sort_capacity) {
            const int m = min(sort_capacity, n - base);
            int p = 1;
            while (p < m) p <<= 1;
            for (int t = tid; t < p; t += NMS_THREADS) {
                s_keys[t] = t < m ? keys[image + base + t] : 0ull;
                s_slots[t] = base + t;
            }
            __syncthreads();
            bitonic_sort(s_keys, s_slots, p, image_cands);
            for (int t = tid; t < m; t += NMS_THREADS) {
                keys_0[base + t] = s_keys[t];
                slots_0[base + t] = s_slots[t];
            }
            __syncthreads();
        }
        bool in_first = true;  // which buffer holds the latest pass
        for (int width = sort_capacity; width < n; width *= 2) {
            if (in_first) merge_pass(keys_0, slots_0, keys_1, slots_1, n, width, image_cands);
            else merge_pass(keys_1, slots_1, keys_0, slots_0, n, width, image_cands);
            __syncthreads();
            in_first = !in_first;
        }
        order = in_first ? slots_0 : slots_1;
    }

    // Greedy NMS in rank order, a tile at a time. A candidate is suppressed by an earlier
    // kept one of its group only; a kept candidate whose class already has max_per_class
    // detections is no detection, and can only suppress candidates of that class, which
    // are none either: so only the detections so far need testing (k_*: the first
    // KEPT_CACHE in shared memory, the rest in spill_*).
    const IouThreshold threshold(iou_threshold);
    const bool capped = max_per_class < max_output;
    const int ranked = min(n, top_k);
    for (int base = 0; base < ranked; base += TILE) {
        const int detections = s_out;  // read after the last barrier
        if (detections >= max_output) break;
        const int m = min(TILE, ranked - base);
        for (int t = tid; t < m; t += NMS_THREADS) {
            const unsigned int slot = order[base + t];
            const long long row = image + slot;
            const Box<A> box = load_box(cand_boxes, row);
            t_box[t] = box;
            t_area[t] = box_area(box);
            t_class[t] = cand_classes[row];
            t_slot[t] = slot;
        }
        if (tid < TILE_WORDS) {
            const int valid = min(32, max(0, m - 32 * tid));
            t_dead[tid] = valid == 32 ? 0u : ~((1u << valid) - 1u);
            t_output[tid] = 0u;
        }
        __syncthreads();
        if (resolved) {  // wide_sort_kernel decided every candidate: the removed ones are dead, the rest keeps
            for (int t = tid; t < m; t += NMS_THREADS)
                if (state[image + t_slot[t]] != STATE_KEPT) atomicOr(&t_dead[t / 32], 1u << (t % 32));
            __syncthreads();
        }
        // (a) against the detections so far: NMS_THREADS / TILE threads a candidate
        if (detections > 0 && !resolved) {
            const int per = NMS_THREADS / TILE, t = tid / per;
            if (t < m) {
                const Box<A> box = t_box[t];
                const A area = t_area[t];
                const long long cls = t_class[t];
                for (int k = tid % per; k < detections; k += per) {
                    const bool cached = k < KEPT_CACHE;
                    const long long spill = (long long)b * max_output + k;
                    const long long kept_class = cached ? k_class[k] : spill_classes[spill];
                    if (!same_group(kept_class, cls, class_agnostic)) continue;
                    const Box<A> kept = cached ? k_box[k]
                                               : Box<A>{spill_boxes[4 * spill], spill_boxes[4 * spill + 1],
                                                        spill_boxes[4 * spill + 2], spill_boxes[4 * spill + 3]};
                    if (overlaps_decisive(kept, cached ? k_area[k] : box_area(kept), box, area, threshold)) {
                        atomicOr(&t_dead[t / 32], 1u << (t % 32));
                        break;
                    }
                }
            }
            __syncthreads();
        }
        // (b) the tile's own mask: row r, word w, bit k: live r suppresses live w * 32 + k > r
        // (none where resolved: its live candidates are all keeps)
        for (int task = tid; task < (resolved ? 0 : m * TILE_WORDS); task += NMS_THREADS) {
            const int r = task / TILE_WORDS, w = task % TILE_WORDS;
            if (w < r / 32 || (t_dead[r / 32] >> (r % 32)) & 1u) continue;  // never read
            const unsigned int live = ~t_dead[w];
            const Box<A> box = t_box[r];
            const A area = t_area[r];
            const long long cls = t_class[r];
            unsigned int bits = 0u;
            for (int k = 0; k < 32; ++k) {
                const int j = w * 32 + k;
                if (j > r && ((live >> k) & 1u) && same_group(cls, t_class[j], class_agnostic) &&
                    overlaps_decisive(box, area, t_box[j], t_area[j], threshold))
                    bits |= 1u << k;
            }
            t_mask[r * TILE_WORDS + w] = bits;
        }
        __syncthreads();
        // (c) one warp keeps the tile's live candidates in rank order: lane w holds removed word w
        // (where resolved every live candidate is a keep: its place is the live ones before it)
        if (resolved) {
            for (int t = tid; t < m; t += NMS_THREADS) {
                const unsigned int live = ~t_dead[t / 32];
                if (!((live >> (t % 32)) & 1u)) continue;
                int q = __popc(live & ((1u << (t % 32)) - 1u));
                for (int w = 0; w < t / 32; ++w) q += __popc(~t_dead[w]);
                t_keep[q] = t;
            }
            if (tid == 0) {
                int keeps = 0;
                for (int w = 0; w < TILE_WORDS; ++w) keeps += __popc(~t_dead[w]);
                s_keeps = keeps;
            }
        } else if (warp == 0) {
            unsigned int removed = lane < TILE_WORDS ? t_dead[lane] : 0xffffffffu;
            int keeps = 0;
            const int wanted = max_output - detections;  // without the cap, keeps past this are no detections
            while (capped || keeps < wanted) {
                const unsigned int live = ~removed;
                const unsigned int lanes = __ballot_sync(0xffffffffu, live != 0u);
                if (lanes == 0u) break;
                const int word = __ffs(lanes) - 1;
                const int r = word * 32 + __ffs(__shfl_sync(0xffffffffu, live, word)) - 1;
                if (lane == 0) t_keep[keeps] = r;
                ++keeps;
                if (lane == word) removed |= 1u << (r % 32);
                if (lane >= word && lane < TILE_WORDS) removed |= t_mask[r * TILE_WORDS + lane];
            }
            if (lane == 0) s_keeps = keeps;
        }
        __syncthreads();
        // (d) which keeps are detections (the per-class cap), then write them in rank order
        const int keeps = s_keeps;
        for (int q = tid; q < keeps; q += NMS_THREADS) {
            bool output = true;
            if (capped) {
                const long long cls = t_class[t_keep[q]];
                int same = 0;
                for (int k = 0; k < detections; ++k)
                    same += same_group(k < KEPT_CACHE ? k_class[k] : spill_classes[(long long)b * max_output + k], cls,
                                       class_agnostic);
                for (int e = 0; e < q; ++e) same += same_group(t_class[t_keep[e]], cls, class_agnostic);
                output = same < max_per_class;
            }
            if (output) atomicOr(&t_output[q / 32], 1u << (q % 32));
        }
        __syncthreads();
        for (int q = tid; q < keeps; q += NMS_THREADS) {
            if (!((t_output[q / 32] >> (q % 32)) & 1u)) continue;
            int o = detections + __popc(t_output[q / 32] & ((1u << (q % 32)) - 1u));
            for (int w = 0; w < q / 32; ++w) o += __popc(t_output[w]);
            if (o >= max_output) continue;
            const int r = t_keep[q];
            const long long row = image + t_slot[r];
            const long long out = (long long)b * max_output + o;
            const Box<A> box = t_box[r];
            write_detection(out, box, cand_scores[row], t_class[r], cands[row], multi_label, classes, out_boxes,
                            out_scores, out_classes, out_indices);
            if (o < KEPT_CACHE) {
                k_box[o] = box;
                k_area[o] = t_area[r];
                k_class[o] = t_class[r];
            } else {
                spill_boxes[4 * out] = box.x1;
                spill_boxes[4 * out + 1] = box.y1;
                spill_boxes[4 * out + 2] = box.x2;
                spill_boxes[4 * out + 3] = box.y2;
                spill_classes[out] = t_class[r];
            }
        }
        if (tid == 0) {
            int total = detections;
            for (int w = 0; w < TILE_WORDS; ++w) total += __popc(t_output[w]);
            s_out = min(total, max_output);
        }
        __syncthreads();
    }
    const int detections = s_out;
    pad_detections(b, detections, max_output, out_boxes, out_scores, out_classes, out_indices);
    if (tid == 0) num_detections[b] = detections;
}

template <typename T>
__global__ void __launch_bounds__(NMS_THREADS, 1) nms_kernel(
    unsigned int* counts, const unsigned long long* keys, const int* cands, const long long* cand_classes,
    const typename Arith<T>::type* cand_boxes, const typename Arith<T>::type* cand_scores, int capacity,
    int sort_capacity, int fast_max, int wide_min, int graph, unsigned long long* sort_keys,
    unsigned int* sort_slots, const int* state,
    typename Arith<T>::type* spill_boxes, long long* spill_classes, int classes, int multi_label, int class_agnostic,
    double iou_threshold, int max_output, int max_per_class, int top_k, long long* num_detections, T* out_boxes,
    T* out_scores, long long* out_classes, long long* out_indices, unsigned char* overflow, long long* num_candidates) {
    nms_image<T>(blockIdx.x, counts, keys, cands, cand_classes, cand_boxes, cand_scores, capacity, sort_capacity,
                 fast_max, wide_min, graph, sort_keys, sort_slots, state, spill_boxes, spill_classes, classes,
                 multi_label, class_agnostic, iou_threshold, max_output, max_per_class, top_k, num_detections,
                 out_boxes, out_scores, out_classes, out_indices, overflow, num_candidates);
}

// ------------------------------------------------------------------ one launch for small batches
// fused_kernel: the decode and nms_kernel in one launch, for a batch whose decode grid
// (decode_rows_kernel's or decode_kernel's, grid x blocks an image, an image a grid row) fits
// the GPU's SMs at once. Block (x, b) decodes as that decode block does, with the same rows
// (`rows`: decode_rows_block, else decode_block); then it counts itself done in the image's
// `done` counter, and the image's last block to finish runs nms_image for it. No block waits
// on another: the last one finds every other block's candidates written (each block's
// stores, then a fence, then its count; the last one's count, then a fence, then its
// loads). The last block zeroes the image's done counter, as nms_image zeroes its candidate
// counter, for the next call that keeps the scratch. The decode's lists live in the
// dynamic shared memory that nms_image carves afresh after the barrier.
template <typename T>
__global__ void __launch_bounds__(NMS_THREADS, 1) fused_kernel(
    const T* data, const T* scores, const long long* labels, int layout, int cxcywh, int batch, int n, int classes,
    int multi_label, int rows, int rows_per_thread, double score_threshold, int capacity, unsigned int* counts,
    unsigned int* done, unsigned long long* keys, int* cands, long long* cand_classes,
    typename Arith<T>::type* cand_boxes, typename Arith<T>::type* cand_scores, int sort_capacity, int fast_max,
    unsigned long long* sort_keys, unsigned int* sort_slots, typename Arith<T>::type* spill_boxes,
    long long* spill_classes, int class_agnostic, double iou_threshold, int max_output, int max_per_class, int top_k,
    long long* num_detections, T* out_boxes, T* out_scores, long long* out_classes, long long* out_indices,
    unsigned char* overflow, long long* num_candidates) {
    extern __shared__ __align__(16) unsigned char shared[];
    __shared__ int s_last;
    const int b = blockIdx.y;
    if (rows) {
        decode_rows_block<T, NMS_THREADS>(blockIdx.x, b, batch, data, batch, n, classes, rows_per_thread,
                                          score_threshold, capacity, counts, keys, cands, cand_classes, cand_boxes,
                                          cand_scores, shared);
    } else {
        decode_block<T>(blockIdx.x, b, batch, data, scores, labels, layout, cxcywh, batch, n, classes, multi_label,
                        score_threshold, capacity, counts, keys, cands, cand_classes, cand_boxes, cand_scores);
    }
    __threadfence();  // this thread's candidates before the block's count
    __syncthreads();
    if (threadIdx.x == 0) {
        s_last = atomicAdd(&done[b], 1u) == gridDim.x - 1;
        __threadfence();  // the other blocks' candidates after their counts
    }
    __syncthreads();
    if (!s_last) return;  // uniform over the block
    __threadfence();
    if (threadIdx.x == 0) done[b] = 0u;
    nms_image<T>(b, counts, keys, cands, cand_classes, cand_boxes, cand_scores, capacity, sort_capacity, fast_max,
                 0x7fffffff, 0, sort_keys, sort_slots, nullptr, spill_boxes, spill_classes, classes, multi_label,
                 class_agnostic, iou_threshold, max_output, max_per_class, top_k, num_detections, out_boxes,
                 out_scores, out_classes, out_indices, overflow, num_candidates);
}
