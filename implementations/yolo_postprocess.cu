// The YOLOv5 GPU post-processing seed's three kernels
// (seeds/yolov5-gpu-postprocess-allpairs-nms.zh.txt), batched: grid.y is the image.
// No host synchronization between them: the NMS and the compaction read each image's
// candidate count on the device.

// 1. Decode + confidence filter. One thread per raw row [cx, cy, w, h, obj, classes...].
// score = obj x best class (the first maximum on ties), kept iff score >= threshold
// (float32, like the other pipelines); rows below the threshold on objectness alone
// cannot pass and leave early. A passing row takes a slot with atomicAdd; when the slots
// run out it is not written, but the count still grows, so the host sees the overflow.
extern "C" __global__ void decode_filter_kernel(const float* raw, int rows, int fields, float conf_threshold,
                                                float width, float height, int capacity, float* boxes,
                                                float* scores, long long* labels, long long* raw_rows,
                                                int* counts) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int image = blockIdx.y;
    if (row >= rows) return;
    const float* p = raw + ((long long)image * rows + row) * fields;
    const float objectness = p[4];
    if (objectness < conf_threshold) return;
    int best = 0;
    float best_score = p[5];
    for (int c = 1; c < fields - 5; ++c) {
        if (p[5 + c] > best_score) {
            best_score = p[5 + c];
            best = c;
        }
    }
    const float score = objectness * best_score;
    if (score < conf_threshold) return;
    const int slot = atomicAdd(counts + image, 1);
    if (slot >= capacity) return;
    const long long at = (long long)image * capacity + slot;
    const float half_w = p[2] * 0.5f, half_h = p[3] * 0.5f;
    boxes[4 * at + 0] = fminf(fmaxf(p[0] - half_w, 0.0f), width);
    boxes[4 * at + 1] = fminf(fmaxf(p[1] - half_h, 0.0f), height);
    boxes[4 * at + 2] = fminf(fmaxf(p[0] + half_w, 0.0f), width);
    boxes[4 * at + 3] = fminf(fmaxf(p[1] + half_h, 0.0f), height);
    scores[at] = score;
    labels[at] = best;
    raw_rows[at] = row;
}

// 2. Class-aware all-pairs NMS over each image's candidates, in whatever slot order the
// atomics gave them: candidate i is suppressed iff a candidate of its label that ranks
// higher (greater score, or equal score and lower raw row) overlaps it above the
// threshold. The rank uses the raw row, not the slot, so the result does not depend on
// the order the decode threads ran in. Candidates stream through shared memory.

extern "C" __global__ void allpairs_nms_kernel(const float* boxes, const float* scores, const long long* labels,
                                               const long long* raw_rows, const int* counts, int capacity,
                                               double iou_threshold, unsigned char* suppressed) {
    const int image = blockIdx.y;
    const int count = min(counts[image], capacity);
    const int first = blockIdx.x * NMS_THREADS;
    if (first >= count) return;  // the same for the whole block
    const long long base = (long long)image * capacity;
    const int i = first + threadIdx.x;
    const bool active = i < count;
    Box<float> box_i = {0, 0, 0, 0};
    float score_i = 0.0f;
    long long label_i = 0, row_i = 0;
    if (active) {
        box_i = load_box(boxes, base + i);
        score_i = scores[base + i];
        label_i = labels[base + i];
        row_i = raw_rows[base + i];
    }
    __shared__ Box<float> others[NMS_THREADS];
    __shared__ float other_scores[NMS_THREADS];
    __shared__ long long other_labels[NMS_THREADS], other_rows[NMS_THREADS];
    bool found = false;
    for (int start = 0; start < count; start += NMS_THREADS) {
        if (__syncthreads_and(found || !active)) break;  // also the barrier before the tile is reused
        const int j = start + threadIdx.x;
        if (j < count) {
            others[threadIdx.x] = load_box(boxes, base + j);
            other_scores[threadIdx.x] = scores[base + j];
            other_labels[threadIdx.x] = labels[base + j];
            other_rows[threadIdx.x] = raw_rows[base + j];
        }
        __syncthreads();
        if (active && !found) {
            const int in_tile = min(NMS_THREADS, count - start);
            for (int k = 0; k < in_tile; ++k) {
                const bool ranks_higher = other_scores[k] > score_i || (other_scores[k] == score_i && other_rows[k] < row_i);
                if (ranks_higher && other_labels[k] == label_i && overlaps(others[k], box_i, iou_threshold)) {
                    found = true;
                    break;
                }
            }
        }
    }
    if (active) suppressed[base + i] = found ? 1 : 0;
}

// 3. Compaction: each surviving candidate takes a slot of the image's output with
// atomicAdd and writes x1, y1, x2, y2, score, label, raw row as 7 floats (labels and raw
// rows are far below 2^24, so exact). The host sorts the few survivors by score.
extern "C" __global__ void compact_kernel(const float* boxes, const float* scores, const long long* labels,
                                          const long long* raw_rows, const unsigned char* suppressed,
                                          const int* counts, int capacity, float* out, int* out_counts) {
    const int image = blockIdx.y;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= min(counts[image], capacity)) return;
    const long long at = (long long)image * capacity + i;
    if (suppressed[at]) return;
    const int slot = atomicAdd(out_counts + image, 1);
    if (slot >= capacity) return;  // cannot happen when out_counts starts at 0; never write past the buffer
    float* o = out + ((long long)image * capacity + slot) * 7;
    o[0] = boxes[4 * at + 0];
    o[1] = boxes[4 * at + 1];
    o[2] = boxes[4 * at + 2];
    o[3] = boxes[4 * at + 3];
    o[4] = scores[at];
    o[5] = (float)labels[at];
    o[6] = (float)raw_rows[at];
}
