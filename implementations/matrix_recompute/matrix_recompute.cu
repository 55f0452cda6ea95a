// Matrix NMS in O(N) memory (the host side is cuda.py beside this file, the design
// implementations/DESIGN.md). No IoU is ever stored: pass 1 keeps each box's max IoU with
// its parents (cmax), pass 2 recomputes the IoUs and keeps each box's minimum candidate
// decay. CHILDREN, PTILE, SEL_WARPS, SB_MAX_THREADS and MID_MAX_THREADS come from cuda.py's
// DEFINES (NVRTC -D). The kernels of its four paths (cuda.py's PATHS):
//
//   single_block_kernel   "one_block": ONE block does everything in shared memory (rank by
//                         counting, cmax, decay, final scores, selection and order by
//                         counting), writes keep / scores padded to N and the count.
//   cooperative_kernel    "cooperative": ONE cooperative launch, the same four
//                         phases over the whole GPU, a warp per box, grid barriers between.
//   rank_kernel           "counting_passes": rank by counting and write the ranked boxes
//     or gather_kernel    (+ areas, labels, scores); "merge_sort_passes": rank_by_score's
//                         order (rank.cu's merge) gathered. Both also
//                         initialise the accumulators and counters of the passes.
//   cmax_kernel           pass 1, grid (parent segment, child chunk): a thread owns one
//   decay_kernel          child, parents stream through shared memory in tiles; partial
//                         results combine with atomic max / min (exact, order-free, so
//                         deterministic). The last segment block of a chunk to finish
//                         pass 2 writes final scores (-inf: not kept) by input index.
//   select_kernel         "counting_passes": keep / scores padded to N and the count, by counting.
//   finalize_kernel       "merge_sort_passes": after torch.sort of the final scores, the same outputs.
//
// The first launch of the eager paths reads every box and score: given verdict_host (see
// row_is_bad in _common.cuh) it also reports whether any row breaks run_nms's value rules.
//
// The decay arithmetic is in double, as in the numba backend (matrix_fused's passes), so
// both give the same final scores to the last bit in all but rare exp rounding cases.


#include "decay.cuh"  // the IoU, cmax and decay arithmetic every path shares

// --------------------------------------------------------------------------- "one_block"

// Shared memory, n boxes (A = float, or double for float64 input): ranked boxes Box<A>,
// labels (long long), keys / parent constants / final keys (8 bytes), areas (A),
// scores then final scores (A), input indices (int): n * (6 sizeof(A) + 20) bytes.
// One thread per box (blockDim.x >= n, a multiple of 32). Every phase ends at a barrier
// before any thread reads what another wrote in it; inactive threads (t >= n) reach
// every barrier.
template <typename T>
__global__ void __launch_bounds__(SB_MAX_THREADS) single_block_kernel(
    const T* boxes, const T* scores, const void* labels, int wide_labels, int n, int linear, double sigma,
    double score_threshold, long long* keep, T* out_scores, long long* count, long long* host_count,
    long long* verdict_host) {
    typedef typename Arith<T>::type A;
    extern __shared__ __align__(16) unsigned char shared[];
    Box<A>* sbox = (Box<A>*)shared;
    long long* slabel = (long long*)(sbox + n);
    unsigned long long* skey = (unsigned long long*)(slabel + n);
    double* sconstant = (double*)skey;  // phase 3 (skey is dead after phase 1)
    A* sarea = (A*)(skey + n);
    A* sfinal = sarea + n;  // scores by rank, then final scores
    int* sorder = (int*)(sfinal + n);
    const bool has_labels = labels != nullptr;

    // 1. load (input order) and rank by counting: a strict total order, so a permutation
    const int t = threadIdx.x;
    const bool active = t < n;
    unsigned long long key = 0ull;
    Box<A> box = {A(0), A(0), A(0), A(0)};
    A score = A(0);
    long long label = 0;
    if (active) {
        box = load_box(boxes, t);
        score = load_value(scores, t);
        if (has_labels) label = load_label(labels, t, wide_labels);
        key = score_key(score);
        skey[t] = key;
        if (verdict_host != nullptr && (box_is_bad(box) || !isfinite(score))) report_bad_row(verdict_host);
    }
    __syncthreads();
    if (active) {
        int rank = 0;
        for (int i = 0; i < n; ++i) rank += ranks_above(skey[i], i, key, t);
        sbox[rank] = quick_box(box);  // see may_overlap: the passes act on IoU > 0 alone
        slabel[rank] = label;
        sarea[rank] = box_area(box);
        sfinal[rank] = score;
        sorder[rank] = t;
    }
    __syncthreads();

    // 2. cmax: thread t owns rank t; its parents are ranks 0 .. t-1
    const int r = t;
    Box<A> me = {A(0), A(0), A(0), A(0)};
    A my_area = A(0);
    long long my_label = 0;
    if (active) {
        me = sbox[r];
        my_area = sarea[r];
        my_label = slabel[r];
        A cmax = A(0);  // plain loops: one thread's chain, where a shortcut's tests cost more than they save
        for (int i = 0; i < r; ++i) {
            if (!may_overlap(sbox[i], me) || (has_labels && slabel[i] != my_label)) continue;
            cmax = max(cmax, iou_with_areas(sbox[i], sarea[i], me, my_area));
        }
        sconstant[r] = parent_constant(double(cmax), linear);
    }
    __syncthreads();

    // 3. decay and final score (sfinal[r]: only thread r reads and writes it here)
    bool kept = false;
    A final = A(0);
    if (active) {
        double candidate = linear ? 1.0 : 0.0;
        for (int i = 0; i < r; ++i) {
            if (!may_overlap(sbox[i], me) || (has_labels && slabel[i] != my_label)) continue;
            const A iou = iou_with_areas(sbox[i], sarea[i], me, my_area);
            if (iou > A(0)) candidate = decay_step(candidate, sconstant[i], double(iou), linear);  // see decay_step
        }
        final = final_score(sfinal[r], candidate, linear, sigma);
        kept = final >= A(score_threshold);
    }
    __syncthreads();  // every read of sconstant (= skey) before it is overwritten

    // 4. order: kept boxes by final score (ties: lower input index), then the others by
    // input index (key 0, under every kept key) - a permutation, so every slot is written
    const int index = active ? sorder[r] : 0;
    const unsigned long long final_key = kept ? score_key(final) : 0ull;
    if (active) skey[r] = final_key;
    __syncthreads();
    if (!active) return;
    int above = 0, kept_above = 0;
    for (int i = 0; i < n; ++i) {
        const unsigned long long k = skey[i];
        const bool a = ranks_above(k, sorder[i], final_key, index);
        above += a;
        kept_above += a && k != 0ull;
    }
    keep[above] = kept ? (long long)index : -1ll;
    store_value(out_scores, above, kept ? final : A(0));
    // One writer of the count: the first box that is not kept (every kept box is above
    // it), or, when all are kept, the last one.
    if ((!kept && above == kept_above) || (kept && above == n - 1)) {
        const long long c = kept ? (long long)n : (long long)kept_above;
        *count = c;
        if (host_count != nullptr) *host_count = c;
    }
}

// --------------------------------------------------------------------------- "counting_passes", "merge_sort_passes"

// Rank `rank` is input box j: write its ranked entries and reset the passes' accumulators.
template <typename T>
__device__ __forceinline__ void write_ranked(const T* boxes, const T* scores, const void* labels, int wide_labels,
                                             long long j, long long rank, typename Arith<T>::type* sbox,
                                             typename Arith<T>::type* sarea, long long* slabel,
                                             typename Arith<T>::type* sscore, typename Arith<T>::type* cmax,
                                             unsigned long long* acc) {
    typedef typename Arith<T>::type A;
    const Box<A> b = load_box(boxes, j);
    ((Box<A>*)sbox)[rank] = quick_box(b);  // see may_overlap: the passes act on IoU > 0 alone
    sarea[rank] = box_area(b);
    sscore[rank] = load_value(scores, j);
    if (labels != nullptr) slabel[rank] = load_label(labels, j, wide_labels);
    cmax[rank] = A(0);
    acc[rank] = NO_CANDIDATE;
}

__device__ __forceinline__ void reset_counters(int* done, int chunks, long long* count) {
    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g < chunks) done[g] = 0;
    if (g == 0 && count != nullptr) *count = 0;
}

// grid: ceil(n / 32), block 32 * RANK_WARPS (each warp counting over a slice of the n scores)
template <typename T>
__global__ void rank_kernel(const T* boxes, const T* scores, const void* labels, int wide_labels, int n,
                            long long* order, typename Arith<T>::type* sbox, typename Arith<T>::type* sarea,
                            long long* slabel, typename Arith<T>::type* sscore, typename Arith<T>::type* cmax,
                            unsigned long long* acc, int* done, int chunks, long long* count,
                            long long* verdict_host) {
    typedef typename Arith<T>::type A;
    __shared__ int slice_count[RANK_WARPS][COUNT_BOXES];
    reset_counters(done, chunks, count);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int j = blockIdx.x * COUNT_BOXES + lane;
    typedef typename ScoreKey<A>::type K;
    const auto key_of = [&](int i) { return K(score_key(A(load_value(scores, i)))); };
    slice_count[warp][lane] = count_above_in_slice<RANK_WARPS>(n, warp, lane, j < n ? key_of(j) : K(0), j, key_of);
    __syncthreads();
    if (warp != 0 || j >= n) return;
    int rank = 0;
    for (int w = 0; w < RANK_WARPS; ++w) rank += slice_count[w][lane];
    order[rank] = j;
    write_ranked(boxes, scores, labels, wide_labels, j, rank, sbox, sarea, slabel, sscore, cmax, acc);
    if (verdict_host != nullptr && row_is_bad(boxes, scores, j)) report_bad_row(verdict_host);
}

// grid: ceil(n / 256), block 256; order from torch.sort(descending=True, stable=True)
template <typename T>
__global__ void gather_kernel(const T* boxes, const T* scores, const void* labels, int wide_labels, int n,
                              const long long* order, typename Arith<T>::type* sbox, typename Arith<T>::type* sarea,
                              long long* slabel, typename Arith<T>::type* sscore, typename Arith<T>::type* cmax,
                              unsigned long long* acc, int* done, int chunks, long long* count) {
    reset_counters(done, chunks, count);
    const long long rank = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (rank < n) write_ranked(boxes, scores, labels, wide_labels, order[rank], rank, sbox, sarea, slabel, sscore, cmax, acc);
}

// Segments of `segment` parents that chunk `chunk`'s children need (at least one block
// runs per chunk, so that pass 2 always has a block to finish the chunk).
__device__ __forceinline__ int live_segments(int chunk, int n, int segment) {
    const int last_child = min(n, (chunk + 1) * CHILDREN) - 1;  // parents: ranks < last_child
    return max(1, (last_child + segment - 1) / segment);
}

// The pass kernels' tile of parents: bit k set where parent k < limit may overlap `me`.
// Marking first and visiting the marked after keeps the exact work to the lanes that
// have it: visited in the marking loop, one lane's overlapping parent made its whole warp
// walk the exact step (see cooperative_kernel's visit_parents).
template <typename A>
__device__ __forceinline__ unsigned long long mark_overlapping(const Box<A>* parent_box, int limit, const Box<A>& me) {
    unsigned long long marked = 0ull;
#pragma unroll 8
    for (int k = 0; k < limit; ++k) marked |= (unsigned long long)may_overlap(parent_box[k], me) << k;
    return marked;
}

// Pass 1. grid (segments, chunks), the longest chunks first; block CHILDREN. Thread t
// owns child j = chunk * CHILDREN + t; the block streams parents [s * segment, ...) below
// the chunk's last child through shared memory, PTILE at a time. Blocks whose segment
// lies wholly above the chunk leave at once (block-uniform, before any barrier).
template <typename T>
__global__ void __launch_bounds__(CHILDREN) cmax_kernel(const typename Arith<T>::type* sbox,
                                                        const typename Arith<T>::type* sarea, const long long* slabel,
                                                        int n, int segment, typename Arith<T>::type* cmax) {
    typedef typename Arith<T>::type A;
    __shared__ Box<A> parent_box[PTILE];
    __shared__ A parent_area[PTILE];
    __shared__ long long parent_label[PTILE];
    const int chunk = gridDim.y - 1 - blockIdx.y, s = blockIdx.x, t = threadIdx.x;
    if (s >= live_segments(chunk, n, segment)) return;
    const int j = chunk * CHILDREN + t;
    const bool active = j < n;
    const int last_child = min(n, (chunk + 1) * CHILDREN) - 1;
    const int begin = s * segment, end = min(begin + segment, last_child);
    Box<A> me = {A(0), A(0), A(0), A(0)};
    A my_area = A(0);
    MaxIou<A> best;
    long long my_label = 0;
    if (active) {
        me = ((const Box<A>*)sbox)[j];
        my_area = sarea[j];
        if (slabel != nullptr) my_label = slabel[j];
    }
    for (int base = begin; base < end; base += PTILE) {
        if (t < PTILE && base + t < end) {
            parent_box[t] = ((const Box<A>*)sbox)[base + t];
            parent_area[t] = sarea[base + t];
            if (slabel != nullptr) parent_label[t] = slabel[base + t];
        }
        __syncthreads();
        const int limit = active ? min(min(PTILE, end - base), j - base) : 0;
        for (unsigned long long marked = mark_overlapping(parent_box, limit, me); marked != 0ull; marked &= marked - 1ull) {
            const int k = __ffsll(marked) - 1;
            if (slabel == nullptr || parent_label[k] == my_label) best.add(parent_box[k], parent_area[k], me, my_area);
        }
        __syncthreads();  // the tile's reads before the next tile's loads
    }
    if (active && best.best > A(0)) atomic_max_nonnegative(cmax + j, best.best);
}

// Pass 2, the same grid and tiles. Each thread's minimum candidate combines into acc[j]
// by atomicMin on ordered keys. The last block of a chunk to finish (CUDA's
// threadFenceReduction pattern: writes fenced before the block is counted done) turns
// the chunk's minima into final scores, written by input index: final if kept (final >=
// score_threshold, compared in A as torch compares), else -inf. With `count` (large N),
// it also adds the number kept.
template <typename T>
__global__ void __launch_bounds__(CHILDREN) decay_kernel(
    const typename Arith<T>::type* sbox, const typename Arith<T>::type* sarea, const long long* slabel,
    const typename Arith<T>::type* cmax, const typename Arith<T>::type* sscore, const long long* order, int n,
    int segment, int linear, double sigma, double score_threshold, unsigned long long* acc, int* done,
    typename Arith<T>::type* final_by_input, long long* count) {
    typedef typename Arith<T>::type A;
    __shared__ Box<A> parent_box[PTILE];
    __shared__ A parent_area[PTILE];
    __shared__ long long parent_label[PTILE];
    __shared__ double parent_constant_[PTILE];
    __shared__ float parent_quick[PTILE];
    __shared__ bool last_block;
    const int chunk = gridDim.y - 1 - blockIdx.y, s = blockIdx.x, t = threadIdx.x;
    const int live = live_segments(chunk, n, segment);
    if (s >= live) return;
    const int j = chunk * CHILDREN + t;
    const bool active = j < n;
    const int last_child = min(n, (chunk + 1) * CHILDREN) - 1;
    const int begin = s * segment, end = min(begin + segment, last_child);
    Box<A> me = {A(0), A(0), A(0), A(0)};
    A my_area = A(0);
    long long my_label = 0;
    if (active) {
        me = ((const Box<A>*)sbox)[j];
        my_area = sarea[j];
        if (slabel != nullptr) my_label = slabel[j];
    }
    const double initial = linear ? 1.0 : 0.0;
    MinDecay<A> decay(linear);
    for (int base = begin; base < end; base += PTILE) {
        if (t < PTILE && base + t < end) {
            parent_box[t] = ((const Box<A>*)sbox)[base + t];
            parent_area[t] = sarea[base + t];
            const double constant = parent_constant(double(cmax[base + t]), linear);
            parent_constant_[t] = constant;
            parent_quick[t] = quick_constant(constant, linear);
            if (slabel != nullptr) parent_label[t] = slabel[base + t];
        }
        __syncthreads();
        const int limit = active ? min(min(PTILE, end - base), j - base) : 0;
        for (unsigned long long marked = mark_overlapping(parent_box, limit, me); marked != 0ull; marked &= marked - 1ull) {
            const int k = __ffsll(marked) - 1;
            if (slabel != nullptr && parent_label[k] != my_label) continue;
            const A iou = iou_with_areas(parent_box[k], parent_area[k], me, my_area);
            if (iou > A(0)) decay.add(iou, parent_constant_ + k, parent_quick[k], linear);
        }
        __syncthreads();
    }
    const double candidate = decay.candidate;
    double smallest = candidate;
    if (live > 1) {
        if (active && candidate < initial) atomicMin(acc + j, ordered_key(candidate));
        __threadfence();
        __syncthreads();
        if (t == 0) last_block = atomicAdd(done + chunk, 1) == live - 1;
        __syncthreads();
        if (!last_block) return;  // block-uniform
        __threadfence();
        if (active) {
            const unsigned long long k = atomicOr(acc + j, 0ull);  // an L2 read of the combined minimum
            smallest = k == NO_CANDIDATE ? initial : min(initial, from_ordered_key(k));
        }
    }
    bool kept = false;
    if (active) {
        const A final = final_score(sscore[j], smallest, linear, sigma);
        kept = final >= A(score_threshold);
        final_by_input[order[j]] = kept ? final : -infinity(A(0));
    }
    if (count != nullptr) {  // the whole block is here
        const unsigned int voters = __ballot_sync(0xffffffffu, kept);
        if (t % 32 == 0 && voters != 0u) atomicAdd((unsigned long long*)count, (unsigned long long)__popc(voters));
    }
}

// N mid. grid ceil(n / 32), block 32 * SEL_WARPS: lane = box j (input order), each warp
// counts over a slice of all n. A kept box's position is the number of kept boxes that
// rank above it (final score, ties by lower index); a box that is not kept goes after
// all kept ones, by input index (ballots, 32 boxes per step). Every slot is written.
template <typename T>
__global__ void select_kernel(const typename Arith<T>::type* final_by_input, int n, long long* keep, T* out_scores,
                              long long* count, long long* host_count) {
    typedef typename Arith<T>::type A;
    __shared__ int slice_position[SEL_WARPS][32], slice_kept[SEL_WARPS][32];
    const A none = -infinity(A(0));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int j = blockIdx.x * 32 + lane;
    const A final_j = j < n ? final_by_input[j] : none;
    const bool kept_j = j < n && final_j != none;
    const unsigned long long key_j = kept_j ? score_key(final_j) : 0ull;
    const bool any_kept = __any_sync(0xffffffffu, kept_j);
    const int slice = (n + SEL_WARPS - 1) / SEL_WARPS;
    const int begin = warp * slice, end = min(n, begin + slice);
    int position = 0, kept_total = 0;  // position: kept ranking above (kept j), else not-kept with a lower index
    for (int base = begin; base < end; base += 32) {  // the same bounds in every lane
        const int i = base + lane, valid = min(32, end - base);
        const A final_i = i < end ? final_by_input[i] : none;
        const bool kept_i = i < end && final_i != none;
        const unsigned int kept_mask = __ballot_sync(0xffffffffu, kept_i);
        const unsigned int valid_mask = valid == 32 ? 0xffffffffu : ((1u << valid) - 1u);
        kept_total += __popc(kept_mask);
        if (!kept_j) {
            const int lower = j - base;  // slice entries with a lower index than j
            const unsigned int lower_mask = lower <= 0 ? 0u : (lower >= 32 ? 0xffffffffu : ((1u << lower) - 1u));
            position += __popc(~kept_mask & valid_mask & lower_mask);
        }
        if (any_kept) {  // warp-uniform
            const unsigned long long mine = kept_i ? score_key(final_i) : 0ull;
            for (int k = 0; k < valid; ++k) {
                const unsigned long long key_i = __shfl_sync(0xffffffffu, mine, k);
                if (kept_j) position += ranks_above(key_i, base + k, key_j, j);
            }
        }
    }
    slice_position[warp][lane] = position;
    slice_kept[warp][lane] = kept_total;
    __syncthreads();
    if (warp != 0 || j >= n) return;
    int below = 0, kept_count = 0;
    for (int w = 0; w < SEL_WARPS; ++w) {
        below += slice_position[w][lane];
        kept_count += slice_kept[w][lane];
    }
    const int p = kept_j ? below : kept_count + below;
    keep[p] = kept_j ? (long long)j : -1ll;
    store_value(out_scores, p, kept_j ? final_j : A(0));
    if ((!kept_j && below == 0) || (kept_j && p == n - 1)) {  // exactly one writer (see single_block_kernel)
        const long long c = kept_j ? (long long)n : (long long)kept_count;
        *count = c;
        if (host_count != nullptr) *host_count = c;
    }
}

// N large, after torch.sort(final_by_input, descending=True, stable=True): the kept boxes
// come first (non-kept are -inf). grid ceil(n / 256), block 256.
template <typename T>
__global__ void finalize_kernel(const typename Arith<T>::type* sorted_final, const long long* sorted_index, int n,
                                const long long* count, long long* keep, T* out_scores, long long* host_count) {
    typedef typename Arith<T>::type A;
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long c = *count;
    if (p < n) {
        const bool kept = p < c;
        keep[p] = kept ? sorted_index[p] : -1ll;
        store_value(out_scores, p, kept ? sorted_final[p] : A(0));
    }
    if (p == 0 && host_count != nullptr) *host_count = c;
}

// --------------------------------------------------------------------------- "cooperative": one launch
// One cooperative launch (cuLaunchCooperativeKernel: every block resident at once, or the
// launch is refused), warps over the boxes in each phase (lanes split the other boxes,
// then a warp reduction), grid barriers between the phases:
//   1. rank by counting over the n score keys and write the ranked boxes, areas, labels
//      and scores (and the order) to global memory, and set each rank's cmax (0) and
//      decay accumulator (NO_CANDIDATE);
//   2. every block copies all n ranked boxes, areas and labels into its shared memory;
//      a task's share of child r's parents (ranks < r): their max IoU with r, combined
//      into cmax[r] by atomic max; the marks of which parents may overlap kept in the
//      warp's mark_slots slots of shared memory (after the constants; 0 slots: none);
//   3. every block copies the n cmax values and makes the float constants; a task's share
//      of child r's parents (the marks read back while slots last): the min candidate
//      decay, combined into acc[r] by atomic min;
//   4. every block makes the n final scores by input index (-inf: not kept) and their
//      keys; select: each box's place by counting over the n final keys.
// Every loop over the other boxes reads shared memory: read from global (L2), a warp's
// loop would wait one memory latency per step. In phases 2 and 3 child r has r parents,
// so children t and n - 1 - t make a pair (n - 1 parents in all) and each pair is two
// tasks, half of those parents each: n tasks of about n / 2 parents, dealt block after
// block. (One task a pair left half the warps idle at N <= 4096, and a child in a dense
// cluster made its warp the one the grid barrier waited for.) What other blocks wrote is
// read after a grid barrier, from L2 (__ldcg).
// Maxima and minima are exact, so the result does not depend on the lanes' order, nor on
// how the parents are split (the float shortcuts skip only steps that cannot change a
// task's running max or min, hence not the combined one).
// Blocks of 256 to 1024 threads (the host picks; at most 512 for float64, whose passes
// need more than the 64 registers a 1024-thread block leaves); dynamic shared memory as
// cooperative_shared_bytes in cuda.py lays it out.
// The copies from global memory into every block's shared memory (after the grid
// barriers) keep COPY_BATCH items a thread in flight: one L2 latency per batch, not per
// item (ncu at 1024 clustered: half the warp samples in those copies and barriers).
#define COPY_BATCH 4
// Every block copies items 0 ... n - 1 into its shared memory: store(i, load(i)), with
// COPY_BATCH items a thread loaded before the first is stored (loads past n repeat item
// n - 1, written like every item before the grid barrier, and are not stored).
template <typename Load, typename Store>
__device__ __forceinline__ void copy_in_batches(int n, Load load, Store store) {
    for (int first = threadIdx.x; first < n; first += COPY_BATCH * blockDim.x) {
        decltype(load(0)) item[COPY_BATCH];
#pragma unroll
        for (int u = 0; u < COPY_BATCH; ++u) item[u] = load(min(first + u * (int)blockDim.x, n - 1));
#pragma unroll
        for (int u = 0; u < COPY_BATCH; ++u)
            if (first + u * (int)blockDim.x < n) store(first + u * (int)blockDim.x, item[u]);
    }
}
template <typename A> struct RankedBox { Box<A> box; A area; long long label; };          // phase 2's copy
template <typename A> struct RankedResult { unsigned long long acc; A score; long long index; };  // phase 4's
template <typename A> struct CooperativeBlock { static constexpr int max_threads = MID_MAX_THREADS; };
template <> struct CooperativeBlock<double> { static constexpr int max_threads = MID_MAX_THREADS / 2; };

template <typename A>
__device__ __forceinline__ A warp_max_nonnegative(A v) {
    for (int offset = 16; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
__device__ __forceinline__ double warp_min(double v) {
    for (int offset = 16; offset > 0; offset /= 2) v = min(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Phases 1 and 4 count, for each box, the boxes that rank above it. With float scores
// (float16 and float32 inputs) the 32-bit score key and the index fit one 64-bit integer
// whose order is "ranks above" (ties by lower index), so the inner loop makes one
// comparison instead of two and a tie test; double scores keep ranks_above.
template <typename A> struct Ranking;
template <> struct Ranking<float> {
    static __device__ __forceinline__ unsigned long long key(unsigned long long score_key, int i) {
        return (score_key << 32) | (0xffffffffu - unsigned(i));
    }
    static __device__ __forceinline__ bool above(unsigned long long key_i, int, unsigned long long key_j, int) {
        return key_i > key_j;
    }
    static __device__ __forceinline__ bool has_score(unsigned long long key) { return (key >> 32) != 0ull; }
};
template <> struct Ranking<double> {
    static __device__ __forceinline__ unsigned long long key(unsigned long long score_key, int) { return score_key; }
    static __device__ __forceinline__ bool above(unsigned long long key_i, int i, unsigned long long key_j, int j) {
        return ranks_above(key_i, i, key_j, j);
    }
    static __device__ __forceinline__ bool has_score(unsigned long long key) { return key != 0ull; }
};

// Phases 2 and 3: visit(i, child box, child area) for child r's parents i in [begin, end)
// (end <= r) that this lane takes (i = begin + lane, + 32, ...) and that may overlap it,
// with its label if any. Lanes first mark their parents that may overlap, 32 at a time (a
// bit each), then visit only the marked: the exact work then runs as often as the busiest
// lane has parents to visit, where visiting inside the first loop made the whole warp
// walk it for every group of 32 parents in which any lane had one (4 groups in 5 at N =
// 8192, clustered).
// The marks of each 1024 parents (a word a lane) go to the warp's next slot in `marks`
// while slots last (mark_slots a warp, from `slot` on): phase 2 stores them and phase 3,
// which visits the same tasks' parents in the same order (`replay`), reads them back
// instead of testing every pair again.
template <typename A, typename Visit>
__device__ __forceinline__ void visit_parents(int r, int begin, int end, int lane, const Box<A>* box, const A* area,
                                              const long long* label, unsigned int* marks, int mark_slots, int& slot,
                                              bool replay, Visit visit) {
    const Box<A> me = box[r];
    const A my_area = area[r];
    const long long my_label = label != nullptr ? label[r] : 0;
    for (int base = begin; base < end; base += 32 * 32, ++slot) {
        const bool slotted = slot < mark_slots;  // warp-uniform
        unsigned int marked = 0u;  // bit w: parent base + 32 w + lane
        if (replay && slotted) {
            marked = marks[32 * slot + lane];
        } else {
            const int whole = min(32, (end - base) / 32), groups = min(32, (end - base + 31) / 32);
            const Box<A>* from = box + base + lane;
#pragma unroll 4
            for (int w = 0; w < whole; ++w) marked |= unsigned(may_overlap(from[32 * w], me)) << w;
            if (whole < groups) {  // the last group, not whole: end <= r < n keeps the load in bounds
                const int i = base + 32 * whole + lane;
                marked |= unsigned((i < end) & may_overlap(box[min(i, end)], me)) << whole;
            }
            if (slotted) marks[32 * slot + lane] = marked;
        }
        while (marked != 0u) {
            const int i = base + 32 * (__ffs(marked) - 1) + lane;
            marked &= marked - 1u;
            if (label == nullptr || label[i] == my_label) visit(i, me, my_area);
        }
    }
}

// Task u of phases 2 and 3 (0 <= u < 2 * ceil(n / 2)): half u % 2 of the parents of pair
// t = u / 2, children a = t and b = n - 1 - t (one child when they are the same), their
// parents taken as one list (a's [0, a), then b's [0, b)) cut in two. Calls
// work(child, begin, end) for each child with parents in this half.
template <typename Work>
__device__ __forceinline__ void for_task_children(int u, int n, Work work) {
    const int t = u >> 1, a = t, b = n - 1 - t;
    const int listed = a < b ? a + b : a;
    const int cut = (listed + 1) / 2, lo = (u & 1) ? cut : 0, hi = (u & 1) ? listed : cut;
    if (lo < min(hi, a)) work(a, lo, min(hi, a));
    if (a < b && max(lo, a) < hi) work(b, max(lo, a) - a, hi - a);
}

template <typename T>
__global__ void __launch_bounds__(CooperativeBlock<typename Arith<T>::type>::max_threads, 1) cooperative_kernel(
    const T* boxes, const T* scores, const void* labels, int wide_labels, int n, int linear, double sigma,
    double score_threshold, long long* order, typename Arith<T>::type* sbox, typename Arith<T>::type* sarea,
    long long* slabel, typename Arith<T>::type* sscore, unsigned long long* acc, typename Arith<T>::type* cmax,
    unsigned int* barrier, long long* keep, T* out_scores, long long* count, long long* host_count, int mark_slots,
    long long* verdict_host) {
    typedef typename Arith<T>::type A;
    extern __shared__ __align__(16) unsigned char shared[];
    unsigned long long* key = (unsigned long long*)shared;          // phase 1: score keys; phase 4: final keys
    A* finals = (A*)(key + n);                                      // phase 4: final scores by input index
    Box<A>* box = (Box<A>*)shared;                                  // phases 2-3: ranked boxes (over the keys)
    const bool has_labels = labels != nullptr;
    long long* label = (long long*)(box + n);                       // phases 2-3: ranked labels (if any)
    A* area = (A*)(label + (has_labels ? n : 0));                   // phases 2-3: ranked areas
    A* parent_cmax = area + n;                                      // phase 3: each parent's cmax
    float* quick = (float*)(parent_cmax + n);                       // phase 3: float parent constants
    unsigned int* marks = (unsigned int*)(quick + n) + (threadIdx.x / 32) * 32 * mark_slots;  // phases 2-3: this warp's
    const int lane = threadIdx.x % 32, warps = gridDim.x * (blockDim.x / 32);
    const int first_warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    // Phases 2 and 3 deal their tasks block after block (task u to warp u / gridDim.x of
    // block u % gridDim.x), so every block gets its share when there are fewer tasks than
    // warps (dealt by first_warp, the first blocks took them all).
    const int task_warp = (threadIdx.x / 32) * gridDim.x + blockIdx.x, tasks = 2 * ((n + 1) / 2);

    // 1. rank
    for (int i = threadIdx.x; i < n; i += blockDim.x) key[i] = Ranking<A>::key(score_key(A(load_value(scores, i))), i);
    __syncthreads();
    for (int j = first_warp; j < n; j += warps) {
        const unsigned long long key_j = key[j];
        int above = 0;
#pragma unroll 4
        for (int i = lane; i < n; i += 32) above += Ranking<A>::above(key[i], i, key_j, j);
        above = warp_sum(above);
        if (lane == 0) {
            const Box<A> b = load_box(boxes, j);
            order[above] = j;
            ((Box<A>*)sbox)[above] = quick_box(b);  // see may_overlap: the passes act on IoU > 0 alone
            sarea[above] = box_area(b);
            const A score = load_value(scores, j);
            sscore[above] = score;
            if (has_labels) slabel[above] = load_label(labels, j, wide_labels);
            cmax[above] = A(0);
            acc[above] = NO_CANDIDATE;
            if (verdict_host != nullptr && (box_is_bad(b) || !isfinite(score))) report_bad_row(verdict_host);
        }
    }
    grid_barrier(barrier);

    // 2. cmax of child r over its parents: each task's share, combined by atomic max
    copy_in_batches(n, [&](int i) {
        const A* from = sbox + 4 * (long long)i;
        return RankedBox<A>{Box<A>{__ldcg(from), __ldcg(from + 1), __ldcg(from + 2), __ldcg(from + 3)},
                            __ldcg(sarea + i), has_labels ? __ldcg(slabel + i) : 0};
    }, [&](int i, const RankedBox<A>& item) {
        box[i] = item.box;
        area[i] = item.area;
        if (has_labels) label[i] = item.label;
    });
    __syncthreads();
    int slot = 0;
    for (int u = task_warp; u < tasks; u += warps) {
        for_task_children(u, n, [&](int r, int begin, int end) {
            MaxIou<A> best;
            visit_parents(r, begin, end, lane, box, area, has_labels ? label : nullptr, marks, mark_slots, slot, false,
                          [&](int i, const Box<A>& me, A my_area) { best.add(box[i], area[i], me, my_area); });
            const A largest = warp_max_nonnegative(best.best);
            if (lane == 0 && largest > A(0)) atomic_max_nonnegative(cmax + r, largest);
        });
    }
    grid_barrier(barrier);

    // 3. the decay of child r: each task's share, combined by atomic min (the exact step
    // derives a parent's double constant from its cmax, as parent_constant does)
    copy_in_batches(n, [&](int i) { return __ldcg(cmax + i); }, [&](int i, A c) {
        parent_cmax[i] = c;
        quick[i] = quick_constant(parent_constant(double(c), linear), linear);
    });
    __syncthreads();
    const double initial = linear ? 1.0 : 0.0;
    slot = 0;
    for (int u = task_warp; u < tasks; u += warps) {
        for_task_children(u, n, [&](int r, int begin, int end) {
            MinDecay<A> decay(linear);
            visit_parents(r, begin, end, lane, box, area, has_labels ? label : nullptr, marks, mark_slots, slot, true,
                          [&](int i, const Box<A>& me, A my_area) {
                const A iou = iou_with_areas(box[i], area[i], me, my_area);
                if (iou > A(0) && !decay.skips(iou, quick[i], linear))  // see decay_step
                    decay.step(iou, parent_constant(double(parent_cmax[i]), linear), linear);
            });
            const double smallest = warp_min(decay.candidate);
            if (lane == 0 && smallest < initial) atomicMin(acc + r, ordered_key(smallest));
        });
    }
    grid_barrier(barrier);

    // 4. every block: the final scores by input index (-inf: not kept) and their keys;
    // select: kept boxes by final score (ties: lower input index), then the others by
    // input index (keys without a score, under every kept key): a permutation, so every
    // slot is written
    const A none = -infinity(A(0));
    copy_in_batches(n, [&](int r) { return RankedResult<A>{__ldcg(acc + r), __ldcg(sscore + r), __ldcg(order + r)}; },
                    [&](int, const RankedResult<A>& item) {
        const double smallest = item.acc == NO_CANDIDATE ? initial : min(initial, from_ordered_key(item.acc));
        const A f = final_score(item.score, smallest, linear, sigma);
        finals[item.index] = f >= A(score_threshold) ? f : none;
    });
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) key[i] = Ranking<A>::key(finals[i] != none ? score_key(finals[i]) : 0ull, i);
    __syncthreads();
    for (int j = first_warp; j < n; j += warps) {
        const unsigned long long key_j = key[j];
        int above = 0, kept_above = 0;
#pragma unroll 4
        for (int i = lane; i < n; i += 32) {
            const unsigned long long k = key[i];
            const bool a = Ranking<A>::above(k, i, key_j, j);
            above += a;
            kept_above += a & Ranking<A>::has_score(k);
        }
        above = warp_sum(above);
        kept_above = warp_sum(kept_above);
        if (lane == 0) {
            const bool kept = Ranking<A>::has_score(key_j);
            keep[above] = kept ? (long long)j : -1ll;
            store_value(out_scores, above, kept ? finals[j] : A(0));
            if ((!kept && above == kept_above) || (kept && above == n - 1)) {  // one writer (see single_block_kernel)
                const long long c = kept ? (long long)n : (long long)kept_above;
                *count = c;
                if (host_count != nullptr) *host_count = c;
            }
        }
    }
}
