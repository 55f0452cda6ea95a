// overlap_graph: the pairs of boxes that overlap, found on grids of cells by box size, and
// greedy NMS resolved on them in parallel rounds; the host side is overlap_graph.py, the
// design implementations/DESIGN.md. SIZE_CLASSES, ROW_THREADS and ROUND_THREADS come from
// overlap_graph.py's DEFINES (NVRTC -D).
//
// The grids are _cpu.overlap_graph's (overlap_graph.device_grid builds them with torch on
// the boxes' device): the boxes split into SIZE_CLASSES classes by size, each class on a
// grid of square cells at least as wide as its largest box, each box binned by its (x1, y1)
// corner, the boxes listed cell after cell (by_cell, from starts). A box's window in class
// k, its box widened left and down by the class's cell side, covers the corners of every
// class-k box that can intersect it. The boxes are in rank order (the host ranks them
// first), so a row's lower indices are its higher-ranked neighbours.

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

// One thread per box i: its same-label neighbours whose IoU is above the threshold (with
// threshold 0: every box it intersects), only the higher-ranked ones (j < i) where
// higher_only, else all. Count mode (indices null): counts[i] = how many. Fill mode:
// row i goes to indices[indptr[i] ...] in the order the cells give them.
// grid_doubles: x0, y0, then the classes' cell sides; grid_ints: the classes' cells per
// row (gx), rows (gy) and first cell (cell0).
template <typename T>
__global__ void __launch_bounds__(ROW_THREADS) graph_rows_kernel(
        const T* boxes, const long long* labels, int n, double threshold, int higher_only, const double* grid_doubles,
        const long long* grid_ints, const long long* starts, const long long* by_cell, long long* counts,
        const long long* indptr, int* indices) {
    typedef typename Arith<T>::type A;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const IouThreshold t(threshold);
    const Box<A> box_i = load_box(boxes, i);
    const A area_i = box_area(box_i);
    const long long label_i = labels != nullptr ? labels[i] : 0;
    const double x0 = grid_doubles[0], y0 = grid_doubles[1];
    const bool fill = indices != nullptr;
    long long w = fill ? indptr[i] : 0;
    for (int k = 0; k < SIZE_CLASSES; ++k) {
        const int gx = int(grid_ints[k]), gy = int(grid_ints[SIZE_CLASSES + k]);
        if (gx == 0) continue;
        const double side = grid_doubles[2 + k];
        const long long cell0 = grid_ints[2 * SIZE_CLASSES + k];
        int xl, xh, yl, yh;
        window(double(box_i.x1) - side, double(box_i.x2), x0, side, gx, xl, xh);
        window(double(box_i.y1) - side, double(box_i.y2), y0, side, gy, yl, yh);
        for (int yy = yl; yy <= yh; ++yy) {
            const long long row = cell0 + (long long)yy * gx;
            const long long end = starts[row + xh + 1];  // cells xl..xh of a grid row are adjacent
            for (long long q = starts[row + xl]; q < end; ++q) {
                const int j = int(by_cell[q]);
                if (j == i || (higher_only && j > i)) continue;
                if (labels != nullptr && labels[j] != label_i) continue;
                const Box<A> box_j = load_box(boxes, j);
                if (!overlaps_decisive(box_i, area_i, box_j, box_area(box_j), t)) continue;
                if (fill) indices[w] = j;
                ++w;
            }
        }
    }
    if (!fill) counts[i] = w;
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
__global__ void __launch_bounds__(ROUND_THREADS) greedy_rounds_kernel(int n, const long long* indptr,
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
            const long long end = indptr[i + 1];
            for (long long s = indptr[i]; s < end; ++s) {
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
// thread per box j: cmax mode (decay null) writes cmax[j], the largest IoU of j with its
// rows' boxes; decay mode writes decay[j] = min(1, f(iou_ij) / f(cmax_i)) over them, in
// double (gaussian: CUDA's exp, within an ulp of the C library's; linear: a parent whose
// 1 - cmax is 0 constrains nothing).
template <typename T>
__global__ void __launch_bounds__(ROW_THREADS) graph_decay_kernel(const T* boxes, int n, const long long* indptr,
                                                                 const int* indices, int linear, double sigma,
                                                                 double* cmax, double* decay) {
    typedef typename Arith<T>::type A;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    const Box<A> box_j = load_box(boxes, j);
    double best = 0.0, smallest = 1.0;
    for (long long s = indptr[j]; s < indptr[j + 1]; ++s) {
        const int i = indices[s];
        const double v = double(box_iou(load_box(boxes, i), box_j));
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
