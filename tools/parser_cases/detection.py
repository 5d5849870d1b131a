"""SSD heads through the parser's `detection_postprocess`: an ONNX model whose two outputs are
the class scores [1, N, C] and the box encodings [1, N, 4], which the parser turns into
DecodeBox (its anchors generated from `feature_map`) + NMS. `ssd` with a softmax head
(and a background column, score and IoU thresholds, variance, a small NMS top), `ssd` with
x-first boxes (`box_format = XY`: the parser swaps the encodings and the anchors), and
`ssd_resnet` (its own anchors, x-first encodings) with a sigmoid head."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from op_cases.common import Case

# anchors per feature map cell, as the parser generates them: ssd: 3 on the first map, 6 after;
# ssd_resnet: 4 on maps with aspect ratios [2], 6 on maps with [2, 3]
SSD_ANCHORS = 3 * 3 * 3 + 2 * 2 * 6 + 1 * 1 * 6      # feature_map [[3,3],[2,2],[1,1]]
RESNET_ANCHORS = 3 * 3 * 4 + 2 * 2 * 6               # feature_map [[3,3],[2,2]]


def _head(activation: str):
    """build(rng, onnx_path): scores = activation(in0 * 1.5), boxes = in1 * 0.8."""
    def build(rng, onnx_path):
        n, c = SHAPES[activation][0]
        k = numpy_helper.from_array(np.array(1.5, np.float32), "k")
        j = numpy_helper.from_array(np.array(0.8, np.float32), "j")
        nodes = [helper.make_node("Mul", ["in0", "k"], ["logits"]),
                 helper.make_node("Mul", ["in1", "j"], ["boxes"])]
        if activation == "softmax":
            nodes.append(helper.make_node("Softmax", ["logits"], ["scores"], axis=-1))
        else:
            nodes.append(helper.make_node("Sigmoid", ["logits"], ["scores"]))
        inputs = [helper.make_tensor_value_info("in0", TensorProto.FLOAT, [1, n, c]),
                  helper.make_tensor_value_info("in1", TensorProto.FLOAT, [1, n, 4])]
        outputs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, n, c]),
                   helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, n, 4])]
        graph = helper.make_graph(nodes, "ssd_head", inputs, outputs, [k, j])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), onnx_path)
    return build


def _head_data(rng, shapes, n, value_range, run):
    """Score logits (coarse: scores tie) and box encodings (ty, tx within +-3, th, tw +-2.5)."""
    logits = np.round(rng.normal(0.0, 1.5, (n,) + shapes[0]) * 4) / 4
    codes = rng.normal(0.0, 1.5, (n,) + shapes[1]).clip(-3.0, 3.0)
    return [logits.astype(np.float32), codes.astype(np.float32)]


SHAPES = {"softmax": [(SSD_ANCHORS, 5), (SSD_ANCHORS, 4)], "sigmoid": [(RESNET_ANCHORS, 3), (RESNET_ANCHORS, 4)]}
SSD = dict(detection_postprocess="ssd", feature_map="[[3,3],[2,2],[1,1]]")
CASES = [
    Case("parser_ssd", "the parser's SSD post-processing (DecodeBox + NMS) of a softmax head, its defaults",
         SHAPES["softmax"], _head("softmax"), data=_head_data, parser=SSD),
    Case("parser_ssd_params", "the same with class_num 4 (a background), score_threshold 0.3, iou_threshold 0.45, "
         "variance [10, 10, 5, 5] and max_box_num 80", SHAPES["softmax"], _head("softmax"), data=_head_data,
         parser=dict(SSD, class_num="4", score_threshold="0.3", iou_threshold="0.45", variance="10,10,5,5",
                     max_box_num="80")),
    Case("parser_ssd_xy", "the same with x-first boxes (box_format XY: the parser swaps the encodings and anchors), "
         "asymmetric activations", SHAPES["softmax"], _head("softmax"), data=_head_data,
         cfg=dict(quantize_method_for_activation="per_tensor_asymmetric"),
         parser=dict(SSD, box_format="XY", score_threshold="0.35")),
    Case("parser_ssd_resnet", "ssd_resnet post-processing (its anchors for a 300 x 300 image) of a sigmoid head",
         SHAPES["sigmoid"], _head("sigmoid"), data=_head_data,
         parser=dict(detection_postprocess="ssd_resnet", feature_map="[[3,3],[2,2]]", image_width="300",
                     image_height="300", score_threshold="0.6")),
]
