// The classic 64-bit-mask NMS (seeds/classic-64bit-bitmask-nms.zh.txt). Boxes arrive
// sorted by rank and are cut into blocks of 64. Block (x = column block, y = row block)
// compares its 64 row boxes with the 64 column boxes held in shared memory and writes one
// 64-bit word per row box: bit c says the row box suppresses box column_block * 64 + c
// (on the diagonal block only boxes after it). The greedy resolve runs on the host.
template <typename T>
__global__ void block_mask_kernel(const T* boxes, const long long* labels, int n, double iou_threshold,
                                  unsigned long long* mask) {
    typedef typename Arith<T>::type A;
    const int row_block = blockIdx.y, column_block = blockIdx.x, column_blocks = gridDim.x;
    const int row_size = min(n - row_block * 64, 64), column_size = min(n - column_block * 64, 64);
    const int t = threadIdx.x;
    if (row_block > column_block) {
        // Below the diagonal nothing can be suppressed; write zeros so that the mask the
        // host copies holds no uninitialized memory.
        if (t < row_size) mask[(long long)(row_block * 64 + t) * column_blocks + column_block] = 0ull;
        return;
    }
    __shared__ Box<A> column_boxes[64];
    if (t < column_size) column_boxes[t] = load_box(boxes, column_block * 64 + t);
    __syncthreads();
    if (t >= row_size) return;
    const int i = row_block * 64 + t;
    const Box<A> box_i = load_box(boxes, i);
    unsigned long long bits = 0ull;
    for (int c = row_block == column_block ? t + 1 : 0; c < column_size; ++c) {
        if (same_label(labels, i, column_block * 64 + c) && overlaps(box_i, column_boxes[c], iou_threshold))
            bits |= 1ull << c;
    }
    mask[(long long)i * column_blocks + column_block] = bits;
}
