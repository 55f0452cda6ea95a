// All-pairs NMS (seeds/yolov5-gpu-postprocess-allpairs-nms.zh.txt). Boxes arrive sorted
// by rank. Box j is suppressed iff some higher-ranked box i < j with the same label
// overlaps it above the threshold, kept or not.
//
// Block (x, y) checks the CANDIDATES boxes of tile x against the higher-ranked boxes of
// chunk y, which it streams through shared memory CANDIDATES at a time. A thread that
// finds a suppressor stores 1 to suppressed[j]. Several blocks may store 1 to one flag;
// none ever stores 0 (the buffer starts zeroed), so the result does not depend on the
// order in which blocks run.

template <typename T>
__global__ void allpairs_kernel(const T* boxes, const long long* labels, int n, double iou_threshold,
                                unsigned char* suppressed) {
    typedef typename Arith<T>::type A;
    const int first_candidate = blockIdx.x * CANDIDATES;
    const int chunk_start = blockIdx.y * CHUNK;
    if (chunk_start >= first_candidate + CANDIDATES - 1) return;  // nobody here ranks above a candidate
    const int chunk_end = min(min(chunk_start + CHUNK, n), first_candidate + CANDIDATES - 1);
    const int j = first_candidate + threadIdx.x;
    const bool active = j < n;
    Box<A> box_j = {0, 0, 0, 0};
    long long label_j = 0;
    if (active) {
        box_j = load_box(boxes, j);
        if (labels != nullptr) label_j = labels[j];
    }
    __shared__ Box<A> parents[CANDIDATES];
    __shared__ long long parent_labels[CANDIDATES];
    bool found = false;
    for (int start = chunk_start; start < chunk_end; start += CANDIDATES) {
        // Doubles as the barrier before the tile is overwritten; stop once every
        // candidate of the block is settled.
        if (__syncthreads_and(found || !active)) break;
        const int i = start + threadIdx.x;
        if (i < chunk_end) {
            parents[threadIdx.x] = load_box(boxes, i);
            parent_labels[threadIdx.x] = labels != nullptr ? labels[i] : 0;
        }
        __syncthreads();
        if (active && !found) {
            const int count = min(min(chunk_end, j) - start, CANDIDATES);  // parents i < j only
            for (int k = 0; k < count; ++k) {
                if (parent_labels[k] == label_j && overlaps(parents[k], box_j, iou_threshold)) {
                    found = true;
                    break;
                }
            }
        }
    }
    if (found) suppressed[j] = 1;
}
