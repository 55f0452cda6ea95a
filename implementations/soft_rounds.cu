// soft_rounds: Soft-NMS (family soft) on CUDA, our own design; the host side is
// soft_rounds.py, the design implementations/DESIGN.md. PAIR_ROWS, PAIR_CHUNK and
// ROUND_THREADS come from soft_rounds.py's DEFINES (NVRTC -D).
//
// A pair of boxes whose decay factor is 1 (IoU 0, a linear pair below the threshold, two
// labels) changes nothing, so the kernels work on the decay graph: the pairs with f < 1
// possible. soft_pairs_kernel counts each box's neighbours and, once the host has their
// offsets, lists them; soft_rounds_kernel then picks in parallel rounds on the lists.

// Whether boxes a and b (IoU v, computed as box_iou does) decay each other, and by what
// factor: the family definition's f, in double (nmsbench.families, tests/definitions.py).
__device__ __forceinline__ bool decays(double v, int linear, double iou_threshold) {
    return v > 0.0 && (!linear || v >= iou_threshold);
}
__device__ __forceinline__ double decay_factor(double v, int linear, double iou_threshold, double sigma) {
    if (linear) return v >= iou_threshold ? 1.0 - v : 1.0;
    return exp(-(v * v) / sigma);
}

// ---------------------------------------------------------------- the decay graph
// Block (x, y): rows x * PAIR_ROWS ... (a thread each) against the column boxes of chunk y
// (PAIR_CHUNK of them, staged PAIR_ROWS at a time in shared memory). A box below the score
// threshold at the start is dropped at once: it has no neighbours and is no one's.
// Count mode (neighbours null): slots[row * chunks + y] = the row's neighbours in the chunk
// (zeroed by the host: a dropped box's row is not written).
// List mode: slots holds their exclusive prefix sums (the host's cumsum), and the row's
// neighbours in the chunk go to neighbours[slots[row * chunks + y] ...], in input order.
template <typename T>
__global__ void __launch_bounds__(PAIR_ROWS) soft_pairs_kernel(const T* boxes, const T* scores, const long long* labels,
                                                              int n, int linear, double iou_threshold,
                                                              double score_threshold, long long* slots,
                                                              int* neighbours) {
    typedef typename Arith<T>::type A;
    __shared__ Box<A> column_box[PAIR_ROWS];
    __shared__ long long column_label[PAIR_ROWS];
    __shared__ bool column_alive[PAIR_ROWS];
    const int i = blockIdx.x * PAIR_ROWS + threadIdx.x, chunks = gridDim.y;
    const int first = blockIdx.y * PAIR_CHUNK, last = min(n, first + PAIR_CHUNK);
    const bool row = i < n && double(A(load_value(scores, i))) >= score_threshold;
    const Box<A> box_i = i < n ? load_box(boxes, i) : Box<A>{0, 0, 0, 0};
    const long long label_i = i < n && labels != nullptr ? labels[i] : 0;
    long long slot = row && neighbours != nullptr ? slots[(long long)i * chunks + blockIdx.y] : 0;
    int count = 0;
    for (int base = first; base < last; base += PAIR_ROWS) {
        __syncthreads();  // the last tile is used up
        const int j = base + threadIdx.x;
        if (j < last) {
            const Box<A> b = load_box(boxes, j);
            column_box[threadIdx.x] = b;
            column_label[threadIdx.x] = labels != nullptr ? labels[j] : 0;
            column_alive[threadIdx.x] = double(A(load_value(scores, j))) >= score_threshold;
        }
        __syncthreads();
        if (!row) continue;
        const int columns = min(PAIR_ROWS, last - base);
        for (int k = 0; k < columns; ++k) {
            const Box<A> b = column_box[k];
            // may_overlap first: four comparisons reject most pairs (it holds wherever box_iou is not 0)
            if (!may_overlap(box_i, b) || base + k == i || !column_alive[k] || column_label[k] != label_i) continue;
            if (!decays(double(box_iou(box_i, b)), linear, iou_threshold)) continue;
            if (neighbours != nullptr) neighbours[slot++] = base + k;
            ++count;
        }
    }
    if (row && neighbours == nullptr) slots[(long long)i * chunks + blockIdx.y] = count;  // the rest stay 0
}

// ---------------------------------------------------------------- the rounds
// Every box keeps the list of its neighbours picked so far with their factors (entries,
// room for its degree after its neighbour list's offset), and its current score is its
// input score times those factors in the order the picks have in the definition: higher
// final score first, ties by lower index. A round:
//  1. every undecided box whose list grew sorts the new entries in and recomputes its
//     current score from its input score (so the products are the definition's, factor
//     for factor, in its order); below the score threshold it is dropped;
//  2. every undecided box that no undecided neighbour outranks (higher current score,
//     ties by lower index) is picked, and adds itself and its factor to the lists of its
//     undecided neighbours.
// Why this is the definition exactly: a box is picked only once no neighbour that the
// definition picks before it is undecided (that neighbour would outrank it: its current
// score is never below its final one, and the box's own is never above the definition's
// at that pick), so its list then holds exactly the definition's factors for it, and two
// boxes picked in one round are never neighbours. The definition's picks are in
// descending final score (ties by index), so the host sorts the picks by that at the end.
// Cooperative launch (every block resident); grid barriers between the phases, and
// __syncthreads alone when the grid is one block. Boxes' state written by other blocks is
// read through L2 (__ldcg).
// state: 0 undecided, 1 dropped; picked_round: -1 or the round a box was picked in.
// counters: three words, the undecided boxes counted in round r go to counters[r % 3].

__device__ __forceinline__ bool outranks(double score_a, int a, double score_b, int b) {
    return score_a > score_b || (score_a == score_b && a < b);
}

__device__ __forceinline__ void rounds_barrier(unsigned int* barrier) {
    if (gridDim.x == 1) __syncthreads();
    else grid_barrier(barrier);
}

template <typename T>
__global__ void __launch_bounds__(ROUND_THREADS) soft_rounds_kernel(
        const T* boxes, const T* scores, int n, int linear, double iou_threshold, double sigma,
        double score_threshold, const long long* slots, int chunks, const int* neighbours, double* current,
        int* state, int* picked_round, int* list_length, int* sorted_length, int* entry_box,
        double* entry_factor, unsigned int* counters, unsigned int* barrier, int* rounds_out) {
    typedef typename Arith<T>::type A;
    const int threads = gridDim.x * blockDim.x, tid = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32, warps = threads / 32, warp = tid / 32;
    for (int i = tid; i < n; i += threads) {
        const double score = double(A(load_value(scores, i)));
        current[i] = score;
        state[i] = score >= score_threshold ? 0 : 1;
        picked_round[i] = -1;
        list_length[i] = 0;
        sorted_length[i] = 0;
    }
    if (tid < 3) counters[tid] = 0u;
    rounds_barrier(barrier);
    int round = 0;
    for (;; ++round) {
        // 1. new entries sorted in, current scores recomputed, drops; the undecided counted
        if (tid == 0) counters[(round + 1) % 3] = 0u;  // last read two rounds ago
        unsigned int undecided = 0u;
        for (int i = tid; i < n; i += threads) {
            if (__ldcg(state + i) != 0 || __ldcg(picked_round + i) >= 0) continue;
            const int length = __ldcg(list_length + i), sorted = sorted_length[i];
            if (length > sorted) {
                const long long at = slots[(long long)i * chunks];
                int* box_at = entry_box + at;
                double* factor_at = entry_factor + at;
                int lowest = length;  // the first place an insertion moved (or wrote)
                for (int k = sorted; k < length; ++k) {  // insertion: few new entries a round
                    const int p = __ldcg(box_at + k);
                    const double f = __ldcg(factor_at + k), score_p = __ldcg(current + p);
                    int place = k;
                    while (place > 0) {
                        const int q = box_at[place - 1];
                        if (!outranks(score_p, p, __ldcg(current + q), q)) break;
                        box_at[place] = q;
                        factor_at[place] = factor_at[place - 1];
                        --place;
                    }
                    box_at[place] = p;
                    factor_at[place] = f;
                    lowest = min(lowest, place);
                }
                sorted_length[i] = length;
                // current is the product of the first `sorted` factors, taken left to right:
                // where every new entry sorted in after them, go on from it, else start over
                const int from = lowest >= sorted ? sorted : 0;
                double score = from > 0 ? current[i] : double(A(load_value(scores, i)));
                for (int k = from; k < length; ++k) score *= factor_at[k];
                current[i] = score;
                if (score < score_threshold) {
                    state[i] = 1;
                    continue;
                }
            }
            ++undecided;
        }
        undecided = warp_sum(int(undecided));
        if (lane == 0 && undecided != 0u) atomicAdd(counters + round % 3, undecided);
        rounds_barrier(barrier);
        if (__ldcg(counters + round % 3) == 0u) break;  // the same in every block
        // 2. picks: a warp per box, 32 neighbours at a time
        for (int i = warp; i < n; i += warps) {
            if (__ldcg(state + i) != 0 || __ldcg(picked_round + i) >= 0) continue;  // warp-uniform
            const double score_i = __ldcg(current + i);
            const long long begin = slots[(long long)i * chunks], end = slots[(long long)(i + 1) * chunks];
            bool outranked = false;
            for (long long s = begin; s < end && !outranked; s += 32) {
                bool mine = false;
                if (s + lane < end) {
                    const int u = neighbours[s + lane];
                    const int picked = __ldcg(picked_round + u);  // one picked this round still competes
                    mine = __ldcg(state + u) == 0 && (picked < 0 || picked == round) &&
                           outranks(__ldcg(current + u), u, score_i, i);
                }
                outranked = __ballot_sync(0xffffffffu, mine) != 0u;
            }
            if (outranked) continue;
            if (lane == 0) picked_round[i] = round;
            const Box<A> box_i = load_box(boxes, i);
            for (long long s = begin + lane; s < end; s += 32) {
                const int u = neighbours[s];
                if (__ldcg(state + u) != 0 || __ldcg(picked_round + u) >= 0) continue;  // not picked now: a neighbour
                const double v = double(box_iou(box_i, load_box(boxes, u)));
                const long long at = slots[(long long)u * chunks] + atomicAdd(list_length + u, 1);
                entry_box[at] = i;
                entry_factor[at] = decay_factor(v, linear, iou_threshold, sigma);
            }
        }
        rounds_barrier(barrier);
    }
    if (tid == 0) *rounds_out = round;
}

// ---------------------------------------------------------------- "one_block": N <= BLOCK_MAX_N
// soft_rows_kernel lists the decay graph into rows of n slots (a thread per row and chunk
// of ROW_CHUNK columns, slots taken by atomics: a row's order is irrelevant, the entries
// are sorted), then soft_block_kernel runs the same rounds in one block of BLOCK_THREADS,
// the boxes and their state in shared memory: no grid barrier, no pair count for the host
// to wait for, no L2 round trip per neighbour looked at. A box whose last blocker still
// outranks it is decided by a thread, the others by a warp each (32 neighbours a step);
// the picks' factors go out a thread per (pick, neighbour); the kernel ranks the
// picks itself (a pick's place: the picks that outrank it), so the host waits once, for
// the count. degree: n ints, zeroed by the host.
template <typename T>
__global__ void __launch_bounds__(PAIR_ROWS) soft_rows_kernel(const T* boxes, const T* scores, const long long* labels,
                                                             int n, int linear, double iou_threshold,
                                                             double score_threshold, int* degree, short* neighbours) {
    typedef typename Arith<T>::type A;
    __shared__ Box<A> column_box[ROW_CHUNK];
    __shared__ long long column_label[ROW_CHUNK];
    __shared__ bool column_alive[ROW_CHUNK];
    const int i = blockIdx.x * PAIR_ROWS + threadIdx.x, first = blockIdx.y * ROW_CHUNK;
    const int columns = min(ROW_CHUNK, n - first);
    for (int k = threadIdx.x; k < columns; k += blockDim.x) {
        column_box[k] = load_box(boxes, first + k);
        column_label[k] = labels != nullptr ? labels[first + k] : 0;
        column_alive[k] = double(A(load_value(scores, first + k))) >= score_threshold;
    }
    __syncthreads();
    if (i >= n || !(double(A(load_value(scores, i))) >= score_threshold)) return;
    const Box<A> box_i = load_box(boxes, i);
    const long long label_i = labels != nullptr ? labels[i] : 0;
    for (int k = 0; k < columns; ++k) {
        const Box<A> b = column_box[k];
        if (!may_overlap(box_i, b) || first + k == i || !column_alive[k] || column_label[k] != label_i) continue;
        if (decays(double(box_iou(box_i, b)), linear, iou_threshold))
            neighbours[(long long)i * n + atomicAdd(degree + i, 1)] = short(first + k);
    }
}

// mark: -2 dropped, -1 undecided, r >= 0 picked in round r; blocker: the neighbour that
// kept a box from being picked in the last round it was looked at (-1: none yet), looked
// at first. Dynamic shared memory (block_shared_bytes in soft_rounds.py): n boxes, n
// current scores (double), then n marks, degrees, list lengths, sorted lengths, the
// round's picks, blockers and the boxes queued for a warp's scan (int; the queue holds the
// picks' rows' ends once the picks are known).
template <typename T>
__global__ void __launch_bounds__(BLOCK_THREADS) soft_block_kernel(
        const T* boxes, const T* scores, int n, int linear, double iou_threshold, double sigma,
        double score_threshold, const int* degree_in, const short* neighbours, short* entry_box,
        double* entry_factor, long long* keep, double* final_score, long long* count_out, long long* host_count,
        int* rounds_out) {
    typedef typename Arith<T>::type A;
    extern __shared__ __align__(16) unsigned char block_shared[];
    Box<A>* box = reinterpret_cast<Box<A>*>(block_shared);
    double* current = reinterpret_cast<double*>(box + n);
    int* mark = reinterpret_cast<int*>(current + n);
    int* degree = mark + n;
    int* length = degree + n;
    int* sorted = length + n;
    int* pick = sorted + n;
    int* blocker = pick + n;
    int* queue = blocker + n;  // the boxes whose rows a warp looks at this round
    __shared__ int undecided[2], picks, queued, kept;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
    for (int i = tid; i < n; i += blockDim.x) {
        box[i] = load_box(boxes, i);
        current[i] = double(A(load_value(scores, i)));
        mark[i] = current[i] >= score_threshold ? -1 : -2;
        degree[i] = degree_in[i];
        length[i] = 0;
        sorted[i] = 0;
        blocker[i] = -1;
    }
    if (tid == 0) undecided[0] = 0, kept = 0;
    __syncthreads();
    int round = 0;
    for (;; ++round) {
        if (tid == 0) undecided[(round + 1) & 1] = 0, picks = 0, queued = 0;  // last read a round ago
        int mine = 0;
        for (int i = tid; i < n; i += blockDim.x) {  // 1. new entries sorted in, scores recomputed, drops
            if (mark[i] != -1) continue;
            const int grown = length[i], before = sorted[i];
            if (grown > before) {
                short* box_at = entry_box + (long long)i * n;
                double* factor_at = entry_factor + (long long)i * n;
                int lowest = grown;
                for (int k = before; k < grown; ++k) {
                    const int p = box_at[k];
                    const double f = factor_at[k];
                    int place = k;
                    while (place > 0 && outranks(current[p], p, current[box_at[place - 1]], box_at[place - 1])) {
                        box_at[place] = box_at[place - 1];
                        factor_at[place] = factor_at[place - 1];
                        --place;
                    }
                    box_at[place] = short(p);
                    factor_at[place] = f;
                    lowest = min(lowest, place);
                }
                sorted[i] = grown;
                const int from = lowest >= before ? before : 0;  // as in soft_rounds_kernel
                double score = from > 0 ? current[i] : double(A(load_value(scores, i)));
                for (int k = from; k < grown; ++k) score *= factor_at[k];
                current[i] = score;
                if (score < score_threshold) {
                    mark[i] = -2;
                    continue;
                }
            }
            ++mine;
        }
        if (mine) atomicAdd(undecided + (round & 1), mine);
        __syncthreads();
        if (undecided[round & 1] == 0) break;  // the same in every thread
        // 2. a box no undecided neighbour outranks is picked: a thread per box asks whether
        // its last blocker still outranks it; the others queue for a warp each, whose lanes
        // look at 32 neighbours a step (the first outranking one by a ballot)
        for (int i = tid; i < n; i += blockDim.x) {
            if (mark[i] != -1) continue;
            const int last = blocker[i];
            if (last >= 0 && mark[last] == -1 && outranks(current[last], last, current[i], i)) continue;
            queue[atomicAdd(&queued, 1)] = i;
        }
        __syncthreads();
        for (int q = warp; q < queued; q += warps) {
            const int i = queue[q], d = degree[i];
            const double score_i = current[i];
            const short* row = neighbours + (long long)i * n;
            int found = -1;
            for (int s = 0; s < d && found < 0; s += 32) {  // warp-uniform: found comes from a ballot
                const int u = s + lane < d ? row[s + lane] : -1;
                const unsigned int beats =
                    __ballot_sync(0xffffffffu, u >= 0 && mark[u] == -1 && outranks(current[u], u, score_i, i));
                if (beats != 0u) found = __shfl_sync(0xffffffffu, u, __ffs(beats) - 1);
            }
            if (lane == 0) {
                blocker[i] = found;
                if (found < 0) pick[atomicAdd(&picks, 1)] = i;
            }
        }
        __syncthreads();
        // 3. each pick's factors to its undecided neighbours: the picks' rows end to end
        // (queue: their inclusive ends, summed by warp 0), a thread per (pick, neighbour)
        if (warp == 0) {
            int carry = 0;
            for (int base = 0; base < picks; base += 32) {
                const int k = base + lane;
                int end = k < picks ? degree[pick[k]] : 0;
                for (int offset = 1; offset < 32; offset <<= 1) {
                    const int below = __shfl_up_sync(0xffffffffu, end, offset);
                    if (lane >= offset) end += below;
                }
                if (k < picks) queue[k] = carry + end;
                carry += __shfl_sync(0xffffffffu, end, 31);
            }
            if (lane == 0) queued = carry;
        }
        __syncthreads();
        for (int k = tid; k < picks; k += blockDim.x) mark[pick[k]] = round;  // no pick neighbours another
        for (int t = tid; t < queued; t += blockDim.x) {
            int low = 0, high = picks - 1;  // the first pick whose rows end after t
            while (low < high) {
                const int middle = (low + high) / 2;
                if (queue[middle] > t) high = middle;
                else low = middle + 1;
            }
            const int p = pick[low], u = neighbours[(long long)p * n + t - (low > 0 ? queue[low - 1] : 0)];
            if (mark[u] != -1) continue;
            const int slot = atomicAdd(length + u, 1);
            entry_box[(long long)u * n + slot] = short(p);
            entry_factor[(long long)u * n + slot] = decay_factor(double(box_iou(box[p], box[u])), linear,
                                                                iou_threshold, sigma);
        }
        __syncthreads();
    }
    int mine = 0;
    for (int i = tid; i < n; i += blockDim.x) {  // the definition's order: a pick's place is the picks above it
        if (mark[i] < 0) continue;
        int place = 0;
        for (int j = 0; j < n; ++j) place += mark[j] >= 0 && outranks(current[j], j, current[i], i);
        keep[place] = i;
        final_score[place] = current[i];
        ++mine;
    }
    if (mine) atomicAdd(&kept, mine);
    __syncthreads();
    if (tid == 0) {
        *count_out = kept;
        if (host_count != nullptr) *host_count = kept;
        *rounds_out = round;
    }
}
