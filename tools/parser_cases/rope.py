"""RotaryEmbedding as the parser writes it: from ONNX Runtime's fused com.microsoft op
(rotate-half, [B, S, hidden] with num_heads, positions from a constant or an int input),
and from ONNX's own RotaryEmbedding (opset 23: interleaved pairs, a partial rotary
dimension, a [B, H, S, D] input, cos/sin already at the positions without position_ids).
cos/sin are constant tables of RoPE angles."""
import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh

from op_cases.common import Case, uniform

SEQ, HEADS, HEAD, POSITIONS = 6, 2, 8, 16


def _tables(width: int, rows=None):
    """cos and sin of RoPE angles: positions 0..POSITIONS-1 (or `rows`), `width` frequencies."""
    angles = np.outer(np.arange(POSITIONS) if rows is None else rows, 1.0 / 10000 ** (np.arange(width) / width))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _save(path, node, x_shape, constants, opsets, int_inputs=()):
    inputs = [h.make_tensor_value_info("in0", TensorProto.FLOAT, x_shape)]
    inputs += [h.make_tensor_value_info(name, TensorProto.INT64, shape) for name, shape in int_inputs]
    graph = h.make_graph([node], "rope", inputs, [h.make_tensor_value_info("out", TensorProto.FLOAT, x_shape)],
                         [nh.from_array(v, k) for k, v in constants.items()])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid(d, v) for d, v in opsets], ir_version=10), path)


MS = [("", 14), ("com.microsoft", 1)]


def _ms(rng, path):
    cos, sin = _tables(HEAD // 2)
    node = h.make_node("RotaryEmbedding", ["in0", "pos", "cos", "sin"], ["out"], domain="com.microsoft",
                       num_heads=HEADS)
    _save(path, node, [1, SEQ, HEADS * HEAD], dict(pos=np.arange(3, 3 + SEQ)[None], cos=cos, sin=sin), MS)


def _ms_positions(rng, path):
    cos, sin = _tables(HEAD // 2)
    node = h.make_node("RotaryEmbedding", ["in0", "in1", "cos", "sin"], ["out"], domain="com.microsoft",
                       num_heads=HEADS)
    _save(path, node, [1, SEQ, HEADS * HEAD], dict(cos=cos, sin=sin), MS, [("in1", [1, SEQ])])


def _positions(rng, shapes, n, value_range, run):
    """x uniform, positions any of the table's (a decode step's, repeats, out of order)."""
    return [uniform(rng, value_range, (n,) + shapes[0]), rng.integers(0, POSITIONS, (n,) + shapes[1])]


def _interleaved_partial(rng, path):
    """Interleaved pairs of the first 4 values of each 8-value head; the rest passes."""
    cos, sin = _tables(2)
    node = h.make_node("RotaryEmbedding", ["in0", "cos", "sin", "pos"], ["out"], interleaved=1, num_heads=HEADS,
                       rotary_embedding_dim=4)
    _save(path, node, [1, SEQ, HEADS * HEAD], dict(cos=cos, sin=sin, pos=np.arange(SEQ)[None] * 2),
          [("", 23)])


def _heads_first(rng, path):
    cos, sin = _tables(HEAD // 2)
    node = h.make_node("RotaryEmbedding", ["in0", "cos", "sin", "pos"], ["out"])
    _save(path, node, [1, HEADS, SEQ, HEAD], dict(cos=cos, sin=sin, pos=np.arange(SEQ)[None] + 5), [("", 23)])


def _no_positions(rng, path):
    """cos/sin already at the positions ([1, S, D/2]): no position_ids input."""
    cos, sin = _tables(HEAD // 2, np.arange(SEQ) + 9)
    node = h.make_node("RotaryEmbedding", ["in0", "cos", "sin"], ["out"], num_heads=HEADS)
    _save(path, node, [1, SEQ, HEADS * HEAD], dict(cos=cos[None], sin=sin[None]), [("", 23)])


CASES = [
    Case("parser_rope_ms", "the parser's RotaryEmbedding from ONNX Runtime's com.microsoft op, constant positions",
         [(SEQ, HEADS * HEAD)], _ms),
    Case("parser_rope_ms_positions", "the parser's RotaryEmbedding from ONNX Runtime's op with a position-id input",
         [(SEQ, HEADS * HEAD), (SEQ,)], _ms_positions, data=_positions),
    Case("parser_rope_interleaved_partial", "the parser's RotaryEmbedding from ONNX's (opset 23): interleaved "
         "pairs of 4 of each head's 8 values", [(SEQ, HEADS * HEAD)], _interleaved_partial),
    Case("parser_rope_heads_first", "the parser's RotaryEmbedding from ONNX's on [B, heads, S, head]",
         [(HEADS, SEQ, HEAD)], _heads_first),
    Case("parser_rope_no_positions", "the parser's RotaryEmbedding from ONNX's with cos/sin at the positions "
         "(batch 1 tables: one sample)", [(SEQ, HEADS * HEAD)], _no_positions, run_samples=1),
]
