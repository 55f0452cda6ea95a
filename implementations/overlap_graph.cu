// overlap_graph: the pairs of boxes that overlap, found on grids of cells by box size, and
// greedy NMS resolved on them in parallel rounds; the host side is overlap_graph.py, the
// design implementations/DESIGN.md. SIZE_CLASSES, ROW_THREADS, ROUND_THREADS and
// SAMPLE_THREADS come from overlap_graph.py's DEFINES (NVRTC -D).
//
// The grids are _cpu.overlap_graph's: the boxes split into SIZE_CLASSES classes by size,
// each class on a grid of square cells at least as wide as its largest box, each box
// binned by its (x1, y1) corner. grid_extent_kernel, grid_classes_kernel and
// grid_table_kernel lay the grids out (overlap_graph.grid_layout), sampled_tests_kernel
// estimates the work before anything else is done, grid_cells_kernel bins the boxes in
// rank order and cell_order_kernel copies them into cell order (a cell's boxes adjacent,
// by rank). A box's window in class k, its box widened left and down by the class's cell
// side, covers the corners of every class-k box that can intersect it. Ranks are the box
// indices the rows hold, so a row's lower indices are its higher-ranked neighbours.

// The cells [first, last] of one axis of a class's grid that a corner in (lo, hi) can lie
// in, in double and clamped to the grid before any conversion to an integer (an overflowed
// bound widens the window, never narrows it): _cpu._window's arithmetic.
__device__ __forceinline__ void window(double lo, double hi, double origin, double side, int cells, int& first,
                                       int& last) {
    const double q = (lo - origin) / side;
    first = !(q > 0.0) ? 0 : (q >= cells ? cells - 1 : int(floor(q)));
    const double r = (hi - origin) / side;
    last = !(r < cells - 1) ? cells - 1 : (r < 0.0 ? 0 : int(floor(r)));
}

// grid_layout's statistics on the GPU, in two launches and no host read between them.
// Doubles are reduced through order_key (_common.cuh), so atomicMax orders them as doubles
// (and a minimum as the maximum of the complemented keys). extent: [largest size, min x1,
// min y1 (complemented), max x1, max y1, max |x1|, max |y1|]; every slot starts at 0.
// classes: per size class its count, then its largest size, x1 and y1 (keys). A box's
// size class follows grid_layout: floor(log2(largest / max(size, largest /
// 2^SIZE_CLASSES))), taken exactly as the ratio's binary exponent (ilogb; log2 would bring
// an approximate reciprocal that flushes subnormals), at most SIZE_CLASSES - 1 (0 where
// every box is a point).
template <typename T>
__global__ void __launch_bounds__(ROW_THREADS) grid_extent_kernel(const T* boxes, int n,
                                                                  unsigned long long* extent) {
    typedef typename Arith<T>::type A;
    __shared__ unsigned long long block[7];
    if (threadIdx.x < 7) block[threadIdx.x] = 0ull;
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    // the keys (the minima's complemented, so that every slot takes a maximum), 0 past n,
    // reduced over the warp first
    unsigned long long keys[7] = {0ull, 0ull, 0ull, 0ull, 0ull, 0ull, 0ull};
    if (i < n) {
        const Box<A> b = load_box(boxes, i);
        const double x1 = double(b.x1), y1 = double(b.y1);
        keys[0] = order_key(fmax(double(b.x2) - x1, double(b.y2) - y1));
        keys[3] = order_key(x1);
        keys[4] = order_key(y1);
        keys[1] = ~keys[3];
        keys[2] = ~keys[4];
        keys[5] = order_key(fabs(x1));
        keys[6] = order_key(fabs(y1));
    }
    for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
        for (int c = 0; c < 7; ++c) keys[c] = max(keys[c], __shfl_down_sync(0xffffffffu, keys[c], offset));
    }
    if (threadIdx.x % 32 == 0) {
#pragma unroll
        for (int c = 0; c < 7; ++c) atomicMax(block + c, keys[c]);
    }
    __syncthreads();
    if (threadIdx.x < 7) atomicMax(extent + threadIdx.x, block[threadIdx.x]);
}

template <typename A>
__device__ __forceinline__ int size_class_of(const Box<A>& b, double largest) {
    const double size = fmax(double(b.x2) - double(b.x1), double(b.y2) - double(b.y1));
    const double ratio = largest / fmax(size, ldexp(largest, -SIZE_CLASSES));
    if (!(ratio == ratio)) return 0;  // points only: 0 / 0
    return min(ilogb(ratio), SIZE_CLASSES - 1);  // ratio >= 1: its exponent is floor(log2(ratio))
}

template <typename T>
__global__ void __launch_bounds__(ROW_THREADS) grid_classes_kernel(const T* boxes, int n,
                                                                   const unsigned long long* extent,
                                                                   unsigned long long* classes) {
    typedef typename Arith<T>::type A;
    __shared__ unsigned long long block[4 * SIZE_CLASSES];
    if (threadIdx.x < 4 * SIZE_CLASSES) block[threadIdx.x] = 0ull;
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    // a box's class and keys; a lane past n takes the neutral keys of class 0 (count 0)
    int k = 0;
    unsigned long long count = 0, size = 0, x1 = 0, y1 = 0;
    if (i < n) {
        const Box<A> b = load_box(boxes, i);
        k = size_class_of(b, key_value(extent[0]));
        count = 1;
        size = order_key(fmax(double(b.x2) - double(b.x1), double(b.y2) - double(b.y1)));
        x1 = order_key(double(b.x1));
        y1 = order_key(double(b.y1));
    }
    // each class present in the warp: its keys reduced over the warp, then one lane's shared
    // atomics (not one a box: a warp's boxes mostly share a class)
    for (int c = 0; c < SIZE_CLASSES; ++c) {
        const bool mine = count != 0 && k == c;
        if (!__any_sync(0xffffffffu, mine)) continue;  // the same in the whole warp
        unsigned long long members = mine, largest = mine ? size : 0, x1_max = mine ? x1 : 0, y1_max = mine ? y1 : 0;
        for (int offset = 16; offset > 0; offset /= 2) {
            members += __shfl_down_sync(0xffffffffu, members, offset);
            largest = max(largest, __shfl_down_sync(0xffffffffu, largest, offset));
            x1_max = max(x1_max, __shfl_down_sync(0xffffffffu, x1_max, offset));
            y1_max = max(y1_max, __shfl_down_sync(0xffffffffu, y1_max, offset));
        }
        if (threadIdx.x % 32 == 0) {
            atomicAdd(block + c, members);
            atomicMax(block + SIZE_CLASSES + c, largest);
            atomicMax(block + 2 * SIZE_CLASSES + c, x1_max);
            atomicMax(block + 3 * SIZE_CLASSES + c, y1_max);
        }
    }
    __syncthreads();
    if (threadIdx.x < 4 * SIZE_CLASSES && block[threadIdx.x] != 0ull) {
        if (threadIdx.x < SIZE_CLASSES) atomicAdd(classes + threadIdx.x, block[threadIdx.x]);
        else atomicMax(classes + threadIdx.x, block[threadIdx.x]);
    }
}

// The grid's parameters (overlap_graph.device_grid's ``table``, doubles): x0, y0, then per
// class its cell side, cells per row (gx, 0: an empty class), rows (gy) and first cell.
struct Grid {
    const double* table;
    __device__ double x0() const { return table[0]; }
    __device__ double y0() const { return table[1]; }
    __device__ double side(int k) const { return table[2 + k]; }
    __device__ int gx(int k) const { return int(table[2 + SIZE_CLASSES + k]); }
    __device__ int gy(int k) const { return int(table[2 + 2 * SIZE_CLASSES + k]); }
    __device__ long long cell0(int k) const { return (long long)table[2 + 3 * SIZE_CLASSES + k]; }
};

// The window of a box in class k: the cells [xl, xh] x [yl, yh] of that class's grid whose
// boxes (binned by their x1, y1 corner) can intersect it; false for an empty class.
template <typename A>
__device__ __forceinline__ bool class_window(const Grid& grid, int k, const Box<A>& box, int& xl, int& xh, int& yl,
                                             int& yh) {
    const int gx = grid.gx(k);
    if (gx == 0) return false;
    const double side = grid.side(k);
    window(double(box.x1) - side, double(box.x2), grid.x0(), side, gx, xl, xh);
    window(double(box.y1) - side, double(box.y2), grid.y0(), side, grid.gy(k), yl, yh);
    return true;
}

// The grid's table from the statistics, one thread: overlap_graph.grid_layout's formulas
// in the same IEEE operations (the file compiles without contraction), so the table is
// the host's to the bit. keys: grid_extent_kernel's extent, then grid_classes_kernel's
// classes; table as Grid reads it; table[2 + 4 * SIZE_CLASSES]: the cells in all (0 with
// the rest where no box has a side above 0: there is no grid).
__global__ void grid_table_kernel(const unsigned long long* keys, double* table) {
    const unsigned long long* classes = keys + 7;
    const double largest = key_value(keys[0]), x0 = key_value(~keys[1]), y0 = key_value(~keys[2]);
    for (int c = 0; c < 3 + 4 * SIZE_CLASSES; ++c) table[c] = c < 2 ? (c == 0 ? x0 : y0) : (c < 2 + SIZE_CLASSES ? 1.0 : 0.0);
    if (!(largest > 0.0)) return;
    const double span = fmax(key_value(keys[3]) - x0, key_value(keys[4]) - y0);
    const double reach = fmax(fmax(key_value(keys[5]), key_value(keys[6])), largest);
    double total = 0.0;
    for (int c = 0; c < SIZE_CLASSES; ++c) {
        table[2 + 3 * SIZE_CLASSES + c] = total;
        const double members = double(classes[c]);
        if (members == 0.0) continue;
        const double root = sqrt(4.0 * members + 16.0);
        const double side = fmax(fmax(key_value(classes[SIZE_CLASSES + c]) * (1.0 + 1e-6) + 1e-9 * reach, span / root),
                                 1e-300);
        const double cells = floor(root) + 2.0;
        const double gx = fmin(fmax(floor((key_value(classes[2 * SIZE_CLASSES + c]) - x0) / side), 0.0), cells - 1.0) + 1.0;
        const double gy = fmin(fmax(floor((key_value(classes[3 * SIZE_CLASSES + c]) - y0) / side), 0.0), cells - 1.0) + 1.0;
        table[2 + c] = side;
        table[2 + SIZE_CLASSES + c] = gx;
        table[2 + 2 * SIZE_CLASSES + c] = gy;
        total += gx * gy;
    }
    table[2 + 4 * SIZE_CLASSES] = total;
}

// A box's cell: its size class's grid, its (x1, y1) corner floored and clamped into the
// grid (grid_layout's binning on the CPU).
template <typename A>
__device__ __forceinline__ int cell_of(const Grid& grid, const Box<A>& b, double largest) {
    const int k = size_class_of(b, largest);
    const double side = grid.side(k);
    const double gx = grid.gx(k), gy = grid.gy(k);
    const double cx = fmin(fmax(floor((double(b.x1) - grid.x0()) / side), 0.0), gx - 1);
    const double cy = fmin(fmax(floor((double(b.y1) - grid.y0()) / side), 0.0), gy - 1);
    return int(double(grid.cell0(k)) + cy * gx + cx);
}

// Each box's cell (largest: the largest box side), the boxes in rank order: box r is
// boxes[order[r]] (boxes[r] where order is null).
template <typename T>
__global__ void __launch_bounds__(ROW_THREADS) grid_cells_kernel(const T* boxes, const long long* order, int n,
                                                                 double largest, const double* grid_table,
                                                                 int* cells) {
    typedef typename Arith<T>::type A;
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    cells[r] = cell_of(Grid{grid_table}, load_box(boxes, order != nullptr ? order[r] : r), largest);
}

// The dispatcher's density estimate, before any box is ranked or binned: the pairs that
// graph_rows_kernel would test from the rows of m sample boxes (box k * n / m for k < m),
// summed into *tests, which is window_tests of those boxes: box j is tested from sample s
// where j's cell lies in s's window in j's class. A block takes SAMPLE_THREADS samples'
// windows into shared memory and a thread per box j compares its cell with each of them.
template <typename T>
__global__ void __launch_bounds__(SAMPLE_THREADS) sampled_tests_kernel(const T* boxes, int n, int m,
                                                                       const unsigned long long* extent,
                                                                       const double* grid_table,
                                                                       unsigned long long* tests) {
    typedef typename Arith<T>::type A;
    __shared__ int4 windows[SAMPLE_THREADS][SIZE_CLASSES];  // (xl, xh, yl, yh); empty: xl > xh
    const Grid grid{grid_table};
    const int first = blockIdx.y * SAMPLE_THREADS, samples = min(SAMPLE_THREADS, m - first);
    if (threadIdx.x < samples) {
        const Box<A> box_s = load_box(boxes, (long long)(first + threadIdx.x) * n / m);
        for (int k = 0; k < SIZE_CLASSES; ++k) {
            int4 w = make_int4(1, 0, 1, 0);
            class_window(grid, k, box_s, w.x, w.y, w.z, w.w);
            windows[threadIdx.x][k] = w;
        }
    }
    __syncthreads();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long found = 0;
    if (j < n) {
        const Box<A> b = load_box(boxes, j);
        const int k = size_class_of(b, key_value(extent[0]));
        const double side = grid.side(k);
        const int cx = int(fmin(fmax(floor((double(b.x1) - grid.x0()) / side), 0.0), double(grid.gx(k) - 1)));
        const int cy = int(fmin(fmax(floor((double(b.y1) - grid.y0()) / side), 0.0), double(grid.gy(k) - 1)));
        for (int s = 0; s < samples; ++s) {
            const int4 w = windows[s][k];
            found += w.x <= cx && cx <= w.y && w.z <= cy && cy <= w.w;
        }
    }
    for (int offset = 16; offset > 0; offset /= 2) found += __shfl_down_sync(0xffffffffu, found, offset);
    if (threadIdx.x % 32 == 0 && found != 0) atomicAdd(tests, found);
}

// The boxes in cell order, for the rows kernel's reads (a window's cells are adjacent
// positions): position q holds box r = by_cell[q] (boxes[order[r]], or boxes[r] where order
// is null), its rank r as int32 and its label where labels are given (by rank order's
// source: labels[order[r]]).
template <typename T>
__global__ void __launch_bounds__(ROW_THREADS) cell_order_kernel(const T* boxes, const long long* order,
                                                                 const long long* labels, int n,
                                                                 const long long* by_cell, T* cell_boxes,
                                                                 int* cell_rank, long long* cell_labels) {
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= n) return;
    const int r = int(by_cell[q]);
    const long long source = order != nullptr ? order[r] : r;
    for (int c = 0; c < 4; ++c) cell_boxes[4 * (long long)q + c] = boxes[4 * source + c];
    cell_rank[q] = r;
    if (labels != nullptr) cell_labels[q] = labels[source];
}

// A group of `lanes` lanes (a power of two up to 16, within one warp) per position t of
// the cell order (cell_order_kernel's arrays; the host takes more lanes where fewer boxes
// would leave the GPU idle), so that a warp's boxes share cells: box i = cell_rank[t]'s
// same-label neighbours whose IoU is above the threshold (with threshold 0: every box it
// intersects), only the higher-ranked ones (j < i) where higher_only, else all. A window's
// row of cells is a run of adjacent positions, which the group's lanes read side by side
// (coalesced loads); a ballot over the group places each lane's find in the row. One lane
// (enough boxes to fill the GPU) takes a row cell by cell instead: a cell lists its boxes
// by rank (the cells were sorted stably), so with higher_only its scan stops at the first
// box ranked at or after i, and no ballot is taken. Three
// modes: count (indices null): counts[i] = how many; fill (indptr given): row i goes to
// indices[indptr[i] ...] in the order the cells give them; slots (indptr null, slots > 0):
// row i goes to indices[i * slots ...], counts[i] = its length, and *overflow = 1 where a
// row is longer than slots (its tail is lost: the caller builds the rows again; overflow
// may be mapped host memory).
template <typename T>
__global__ void __launch_bounds__(ROW_THREADS) graph_rows_kernel(
        const T* cell_boxes, const int* cell_rank, const long long* cell_labels, int n, double threshold,
        int higher_only, const double* grid_table, const int* starts, long long* counts, const long long* indptr,
        int* indices, int slots, long long* overflow, int lanes) {
    typedef typename Arith<T>::type A;
    const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int t = int(thread / lanes), lane = threadIdx.x % lanes;
    if (t >= n) return;  // the whole group: t is the group's
    const unsigned group = ((1u << lanes) - 1u) << (threadIdx.x % 32 - lane);
    const unsigned below = group & ((1u << (threadIdx.x % 32)) - 1u);  // the group's lanes before this one
    const int i = cell_rank[t];
    const Grid grid{grid_table};
    const IouThreshold th(threshold);
    const Box<A> box_i = load_box(cell_boxes, t);
    const A area_i = box_area(box_i);
    const long long label_i = cell_labels != nullptr ? cell_labels[t] : 0;
    const bool fill = indices != nullptr;
    const long long first = indptr != nullptr ? indptr[i] : (long long)i * slots;
    const long long room = indptr != nullptr ? 0x7fffffffffffffffLL : slots;
    long long w = 0;
    for (int k = 0; k < SIZE_CLASSES; ++k) {
        int xl, xh, yl, yh;
        if (!class_window(grid, k, box_i, xl, xh, yl, yh)) continue;
        for (int yy = yl; yy <= yh; ++yy) {
            const long long row = grid.cell0(k) + (long long)yy * grid.gx(k);
            const int end = starts[row + xh + 1];  // cells xl..xh of a grid row are adjacent
            if (lanes == 1) {  // a lane a box: cell by cell, a cell's scan stopping at rank i
                int q = starts[row + xl];
                for (long long cell = row + xl; cell <= row + xh; ++cell) {
                    const int cell_end = starts[cell + 1];
                    for (; q < cell_end; ++q) {
                        const int j = cell_rank[q];
                        if (higher_only && j >= i) break;
                        if (j == i || (cell_labels != nullptr && cell_labels[q] != label_i)) continue;
                        const Box<A> box_j = load_box(cell_boxes, q);
                        if (!overlaps_decisive(box_i, area_i, box_j, box_area(box_j), th)) continue;
                        if (fill && w < room) indices[first + w] = j;
                        ++w;
                    }
                    q = cell_end;
                }
                continue;
            }
            for (int base = starts[row + xl]; base < end; base += lanes) {
                const int q = base + lane;
                int j = -1;
                bool found = false;
                if (q < end) {
                    j = cell_rank[q];
                    if (j != i && !(higher_only && j > i) && (cell_labels == nullptr || cell_labels[q] == label_i)) {
                        const Box<A> box_j = load_box(cell_boxes, q);
                        found = overlaps_decisive(box_i, area_i, box_j, box_area(box_j), th);
                    }
                }
                const unsigned finds = __ballot_sync(group, found);
                const long long at = w + __popc(finds & below);
                if (found && fill && at < room) indices[first + at] = j;
                w += __popc(finds);
            }
        }
    }
    if (lane != 0) return;
    if (indptr == nullptr) counts[i] = w;
    if (fill && w > room) *overflow = 1;
}

// Greedy NMS on the rows of higher-ranked neighbours, in rounds over the whole GPU (one
// cooperative launch, a grid barrier a round): an undecided box with a kept neighbour is
// removed, one whose neighbours are all removed is kept. Decisions are final and each is
// the definition's whenever it is taken (a kept neighbour removes the box in greedy NMS;
// neighbours all removed leave nothing that can), so a box may read a neighbour decided
// in this very round or not yet: either way it decides right or waits a round. Each
// round decides at least the highest-ranked undecided box (its neighbours are decided).
// state: 0 undecided, 1 kept, 2 removed (read across blocks through L2: __ldcg);
// counters: three words, the undecided boxes counted in round r go to counters[r % 3].
// Rows as graph_rows_kernel leaves them: indptr's (fill mode), or where indptr is null,
// min(counts[i], slots) entries from indices[i * slots] (slots mode).
__global__ void __launch_bounds__(ROUND_THREADS) greedy_rounds_kernel(int n, const long long* indptr,
                                                                     const long long* counts, int slots,
                                                                     const int* indices, int* state,
                                                                     unsigned int* counters, unsigned int* barrier,
                                                                     int* rounds_out) {
    const int threads = gridDim.x * blockDim.x, tid = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32;
    for (int i = tid; i < n; i += threads) state[i] = 0;
    if (tid < 3) counters[tid] = 0u;
    grid_barrier(barrier);
    int round = 0;
    for (;; ++round) {
        if (tid == 0) counters[(round + 1) % 3] = 0u;  // last read two rounds ago
        int undecided = 0;
        for (int i = tid; i < n; i += threads) {
            if (__ldcg(state + i) != 0) continue;
            bool kept_neighbour = false, all_removed = true;
            const long long start = indptr != nullptr ? indptr[i] : (long long)i * slots;
            // a row longer than its slots holds its first slots entries (the host then
            // discards this launch's answer: the overflow word)
            const long long end = indptr != nullptr ? indptr[i + 1] : start + min(counts[i], (long long)slots);
            for (long long s = start; s < end; ++s) {
                const int neighbour = __ldcg(state + indices[s]);
                if (neighbour == 1) {
                    kept_neighbour = true;
                    break;
                }
                all_removed = all_removed && neighbour == 2;
            }
            if (kept_neighbour) __stcg(state + i, 2);
            else if (all_removed) __stcg(state + i, 1);
            else ++undecided;
        }
        undecided = warp_sum(undecided);
        if (lane == 0 && undecided != 0) atomicAdd(counters + round % 3, unsigned(undecided));
        grid_barrier(barrier);
        if (__ldcg(counters + round % 3) == 0u) break;  // the same in every block
    }
    if (tid == 0) *rounds_out = round + 1;
}

// Matrix NMS's decay on the rows of higher-ranked neighbours with IoU > 0 (matrix_graph's
// CPU arithmetic: a pair with IoU 0 never lowers the minimum, see matrix_graph.py), a
// thread per box j (boxes by rank: boxes[order[j]]): cmax mode (decay null) writes
// cmax[j], the largest IoU of j with its rows' boxes; decay mode writes decay[j] = min(1, f(iou_ij) / f(cmax_i)) over them, in
// double (gaussian: CUDA's exp, within an ulp of the C library's; linear: a parent whose
// 1 - cmax is 0 constrains nothing).
template <typename T>
__global__ void __launch_bounds__(ROW_THREADS) graph_decay_kernel(const T* boxes, const long long* order, int n,
                                                                 const long long* indptr, const int* indices,
                                                                 int linear, double sigma, double* cmax,
                                                                 double* decay) {
    typedef typename Arith<T>::type A;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    const Box<A> box_j = load_box(boxes, order[j]);
    double best = 0.0, smallest = 1.0;
    for (long long s = indptr[j]; s < indptr[j + 1]; ++s) {
        const int i = indices[s];
        const double v = double(box_iou(load_box(boxes, order[i]), box_j));
        if (decay == nullptr) {
            best = v > best ? v : best;
            continue;
        }
        const double c = cmax[i];
        double ratio;
        if (linear) {
            const double room = 1.0 - c;
            ratio = room != 0.0 ? (1.0 - v) / room : infinity(1.0);
        } else {
            ratio = exp((c * c - v * v) / sigma);
        }
        smallest = ratio < smallest ? ratio : smallest;
    }
    if (decay == nullptr) cmax[j] = best;
    else decay[j] = smallest;
}
