"""The one-node ONNX model of the ``NonMaxSuppression`` operator and its ONNX Runtime
session, as the ``onnxruntime`` entry, the ``onnxruntime_nms`` pipeline and the
conformance suite's operator subject run it (the harness may not import a variant, so the
model lives here). Needs ``onnx`` and ``onnxruntime`` (``.[externals]``)."""

from __future__ import annotations

OPSET = 11  # NonMaxSuppression took its current form (optional score threshold, center_point_box) in opset 11


def nms_session(name: str, boxes_shape: list, scores_shape: list, score_threshold: bool = False,
                center_point_box: int = 0):
    """An ONNX Runtime session (CPU, one thread) of a model holding one NonMaxSuppression
    node: boxes ``boxes_shape``, scores ``scores_shape``, max boxes per class, IoU threshold
    (and the score threshold with ``score_threshold``) -> selected_indices [K, 3]. The model
    declares the oldest IR version its opset allows, not the installed onnx's newest, which
    an older onnxruntime refuses to read."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, boxes_shape),
              helper.make_tensor_value_info("scores", TensorProto.FLOAT, scores_shape),
              helper.make_tensor_value_info("max_output_boxes_per_class", TensorProto.INT64, [1]),
              helper.make_tensor_value_info("iou_threshold", TensorProto.FLOAT, [1])]
    if score_threshold:
        inputs.append(helper.make_tensor_value_info("score_threshold", TensorProto.FLOAT, [1]))
    node = helper.make_node("NonMaxSuppression", [i.name for i in inputs], ["selected_indices"], center_point_box=center_point_box)
    graph = helper.make_graph([node], name, inputs,
                              [helper.make_tensor_value_info("selected_indices", TensorProto.INT64, [None, 3])])
    opsets = [helper.make_opsetid("", OPSET)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
    onnx.checker.check_model(model)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
