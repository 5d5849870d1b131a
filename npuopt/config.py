"""The cfg field table: every field of the Compass Optimizer 4.2's cfg, with its syntax,
and npuopt's own; the value parsers they use. Import cfg names from here (the
machinery, npuopt/cfg_reader.py, is re-exported: importing this module is what
registers the fields).

Each field has a name, a default, a parser that validates and converts the
text, and one line of help. Plugins may add fields with `register_field`.
A field either works as it does in the Compass Optimizer, or is accepted with one
logged line that says why it changes nothing in npuopt (`no_effect`: chip tiling,
library flags), or stops the run with one line when its value asks for something
npuopt does not implement yet (`unsupported`). Names are case-insensitive, as there.
"""
import re

from .cfg_reader import (FIELDS, Config, PerLayer, as_text, current_config, default_of, defaults,  # noqa: F401
                         field_table, fields_markdown, load_config, parse_field, parse_per_layer, register_field)
from .errors import ConfigError
from .outputs import safe_name
from .quant.formats import QuantMethod
from .quant.candidates import parse_candidates
from .quant.strategies import KNOWN as IMPLEMENTED_STRATEGIES, Strategy, check_strategy
from .registry import unknown_global_calibrations


# ---- value parsers: each raises ValueError when the text is not accepted ----
def _bool(s):
    low = s.strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off"):
        return False
    raise ValueError


def _int_in(lo, hi):
    def parse(s):
        v = int(s)
        if not lo <= v <= hi:
            raise ValueError
        return v
    return parse


def _float_in(lo, hi):
    def parse(s):
        v = float(s)
        if not lo <= v <= hi:
            raise ValueError
        return v
    return parse


def _choice(*choices):
    def parse(s):
        if s.strip().lower() not in choices:
            raise ValueError
        return s.strip().lower()
    return parse


def _pattern(regex):
    """Text that matches `regex` (case-insensitive), kept as written without spaces."""
    compiled = re.compile(regex, re.IGNORECASE)

    def parse(s):
        s = re.sub(r"\s+", "", s)
        if not compiled.fullmatch(s):
            raise ValueError
        return s
    return parse


def _name_list(s):
    """Comma-separated names, each optionally with arguments: `TopKMetric,TopKMetric(5)`;
    text outside them (an unclosed parenthesis, say) is not accepted."""
    item = r"[^,(]+(?:\([^)]*\))?"
    items = [m.strip() for m in re.findall(item, s) if m.strip()]
    if not re.fullmatch(r"[\s,]*", re.sub(item, "", s)):
        raise ValueError
    for name in items:
        if not re.fullmatch(r"[A-Za-z_][\w.]*(\([^()]*\))?", name):
            raise ValueError
    return items


WEIGHT_ONLY_MODE = re.compile(r"_act_(int|fp8e4m3fn|fp4e2m1fn)_wht")  # float activations, quantized weights
FLOAT_MODES = ("disable", "float16_preferred", "bfloat16_preferred", "float32_preferred",
               "float16_act_int_wht", "bfloat16_act_int_wht", "float32_act_int_wht",
               "float16_act_fp8e4m3fn_wht", "float16_act_fp4e2m1fn_wht", "bfloat16_act_fp8e4m3fn_wht",
               "bfloat16_act_fp4e2m1fn_wht", "float32_act_fp8e4m3fn_wht", "float32_act_fp4e2m1fn_wht")


def _float_mode(s):
    mode = s.strip().lower()
    if mode.rstrip("!") not in FLOAT_MODES or mode.count("!") > 1:
        raise ValueError
    return mode


def _float_ops(s):
    """npuopt's list of layer types/names kept in float ('disable': none), or OPT's
    float modes: `float16_preferred`, `disable & <[Softmax]:float16_preferred!>`, ..."""
    if s.strip().lower() in ("", "disable"):
        return []
    if s.partition("&")[0].strip().lower().rstrip("!") in FLOAT_MODES:
        return parse_per_layer(s, _float_mode)
    return _name_list(s)


QUANTIZE_METHODS = ("per_tensor_symmetric_restricted_range", "per_tensor_symmetric_full_range",
                    "per_channel_symmetric_restricted_range", "per_channel_symmetric_full_range",
                    "per_tensor_asymmetric", "per_channel_asymmetric")
PER_BLOCK_METHODS = ("per_block_symmetric_restricted_range", "per_block_symmetric_full_range",
                     "per_block_asymmetric")


def _method(*choices):
    choice = _choice(*choices)
    return lambda s: QuantMethod(choice(s))


_R = r"[-+]?\d+(?:\.\d*)?"
CALIBRATION_STRATEGY = re.compile(
    r"extrema|mean|in_ir|kld|\d+kld|mse|\d+(\.\d+)?std|(\d+(\.\d*)?)?(aciq_laplace|aciq_gauss|percentile)"
    rf"|weighted_scale_param\[{_R},{_R},{_R},{_R},?\]")


def _strategy(s):
    """A Strategy where npuopt implements it, else the text (which _strategy_unsupported refuses)."""
    s = re.sub(r"\s+", "", s).lower()
    if not CALIBRATION_STRATEGY.fullmatch(s):
        raise ValueError
    try:
        return check_strategy(s)
    except ConfigError:
        return s


def _strategy_unsupported(s) -> str:
    if isinstance(s, Strategy):
        return ""
    try:
        check_strategy(s)
    except ConfigError as e:
        if "percentile must be" in str(e) or "is not implemented in npuopt" in str(e):
            return str(e)
        return f"calibration strategy '{s}' is not implemented in npuopt yet"
    return ""


_STRATEGY_ACCEPTS = (f"{IMPLEMENTED_STRATEGIES} (its automatic form, a > 1: npuopt's own search of alpha, see "
                    f"docs/calibration.md)")


def _multiplier_bits(s):
    return _int_in(2, 15)(s) if s.strip() else 0


QUANT_TYPES = ("disable", "w8a8", "w16a16", "w4", "w8", "w4afp16", "w8afp16", "w4abfp16", "w8abfp16", "wfp4",
               "wfp4afp16", "wfp4abfp16", "wfp4afp32", "w4afp8e5m2", "w4afp8e4m3", "wfp4afp8e5m2", "wfp4afp8e4m3",
               "wfp8afp8", "wfp8e5m2afp8e5m2", "wfp8e4m3afp8e4m3", "fp16", "bf16", "bfp16")
_W8A8 = dict(activation_bits=8, weight_bits=8, bias_bits=32, lut_items_in_bits=8)
def _fp8(activations: str, weights: str, **bits) -> dict:
    """An fp8 quant_type's settings on its fp8 layers: the formats, 8-bit integers' bits for
    the rest. (The activations' range stays the cfg's strategy: the extrema, which a float
    format's relative step suggests, gave transformer_encoder's e4m3 output cosine 0.99900
    against 0.99899 and EfficientNet-Lite0 0.844 against 0.848.)"""
    return dict(_W8A8, activation_type=activations, weight_type=weights, **bits)


# the settings each quant_type value sets on the layers it is given for (OPT 4.2 resets
# quant_type per layer and changes nothing: npuopt gives the names their plain meaning)
QUANT_TYPE_SETTINGS = {
    "w8a8": _W8A8,
    "w16a16": dict(activation_bits=16, weight_bits=16, bias_bits=48, lut_items_in_bits=10),
    # w4/w8: weight-only with float16 activations, as the tool chain's QuantType table has them
    "w4": dict(weight_bits=4, trigger_float_op="float16_act_int_wht"),
    "w8": dict(weight_bits=8, trigger_float_op="float16_act_int_wht"),
    "w4afp16": dict(weight_bits=4, trigger_float_op="float16_act_int_wht"),
    "w8afp16": dict(weight_bits=8, trigger_float_op="float16_act_int_wht"),
    "w4abfp16": dict(weight_bits=4, trigger_float_op="bfloat16_act_int_wht"),
    "w8abfp16": dict(weight_bits=8, trigger_float_op="bfloat16_act_int_wht"),
    "fp16": dict(trigger_float_op="float16_preferred"),
    "bf16": dict(trigger_float_op="bfloat16_preferred"), "bfp16": dict(trigger_float_op="bfloat16_preferred"),
    # scaled fp8 activations (and weights), on FP8_LAYER_TYPES only; 8-bit integers elsewhere
    "wfp8afp8": _fp8("float8_e4m3fn", "float8_e4m3fn"),
    "wfp8e4m3afp8e4m3": _fp8("float8_e4m3fn", "float8_e4m3fn"),
    "wfp8e5m2afp8e5m2": _fp8("float8_e5m2", "float8_e5m2"),
    "w4afp8e4m3": _fp8("float8_e4m3fn", "int", weight_bits=4),
    "w4afp8e5m2": _fp8("float8_e5m2", "int", weight_bits=4),
    "wfp4afp8e4m3": _fp8("float8_e4m3fn", "float4_e2m1fn", weight_bits=4),
    "wfp4afp8e5m2": _fp8("float8_e5m2", "float4_e2m1fn", weight_bits=4),
    # fp4 weights with float activations (weight-only)
    "wfp4": dict(weight_bits=4, trigger_float_op="float16_act_fp4e2m1fn_wht"),
    "wfp4afp16": dict(weight_bits=4, trigger_float_op="float16_act_fp4e2m1fn_wht"),
    "wfp4abfp16": dict(weight_bits=4, trigger_float_op="bfloat16_act_fp4e2m1fn_wht"),
    "wfp4afp32": dict(weight_bits=4, trigger_float_op="float32_act_fp4e2m1fn_wht"),
}
# the layer types the tool chain's fp8 quant_types apply to (its supprot_fp_quant_type_op_type_):
# the linear layers, graph inputs and constants, and the layers that only move values
SHAPE_ONLY_TYPES = ("Reshape", "Permute", "Transpose", "Squeeze", "Tile", "Repeat", "Pad", "StridedSlice", "Slice",
                    "Split", "Crop", "SpaceToDepth", "DepthToSpace", "SpaceToBatch", "BatchToSpace", "BatchToDepth")
FP8_LAYER_TYPES = {
    "wfp8afp8": ("Convolution", "FullyConnected", "DepthwiseConv", "MatMul", "Input", "Constant") + SHAPE_ONLY_TYPES,
    "w4afp8e4m3": ("FullyConnected",) + SHAPE_ONLY_TYPES, "w4afp8e5m2": (),
    "wfp4afp8e4m3": ("FullyConnected",) + SHAPE_ONLY_TYPES, "wfp4afp8e5m2": ()}
FP8_LAYER_TYPES.update(wfp8e4m3afp8e4m3=FP8_LAYER_TYPES["wfp8afp8"], wfp8e5m2afp8e5m2=FP8_LAYER_TYPES["wfp8afp8"])


# fused activations an fp8 layer computes (the tool chain's fused RELU6/CLIP/... forwards
# fail on an fp8 layer, which has no shift_value)
FP8_FUSED = ("NONE", "RELU")


def quant_type_settings(q: str, layer_type: str, fused: str = "NONE", minifloat: bool = True) -> dict:
    """The settings quant_type `q` sets on a layer of `layer_type` (with fused activation
    `fused`): an fp8 type's formats only where FP8_LAYER_TYPES has the type, the fused
    activation is in FP8_FUSED and `minifloat` allows them (8-bit integers elsewhere, as the
    tool chain resets quant_type on other layers)."""
    values = dict(QUANT_TYPE_SETTINGS.get(q, {}))
    if q in FP8_LAYER_TYPES and (layer_type not in FP8_LAYER_TYPES[q] or str(fused).upper() not in FP8_FUSED
                                 or not minifloat):
        values = dict(_W8A8)
    return values


# ---- global_calibration and mixed_precision_auto_search: OPT's syntax -------------------
# the methods are registered in npuopt/quant/global_calibration (OPT's, npuopt's own, plugins')
_GC_ONE = re.compile(rf"([a-z_][a-z0-9_]*)"
                     rf"(\[{_R}(,{_R})*\](\[\w+(,\w+)*\]|\[\(\d+,\d+\)(,\(\d+,\d+\))*\]|\{{.*\}})?)?")


def _global_calibration(s):
    """'none', or methods joined by '&', each `name[params][scope]`: a list of (name, params, scope)."""
    text = re.sub(r"\s+", "", s).lower()
    if text in ("", "none"):
        return []
    methods = []
    for part in text.split("&"):
        m = _GC_ONE.fullmatch(part)
        if not m:
            raise ValueError
        params = [float(x) for x in re.findall(_R, part[len(m.group(1)):].split("]")[0])] if m.group(2) else []
        methods.append((m.group(1), params, part[len(m.group(1)):]))
    return methods


def _mixed_precision(s):
    """'batches,threshold,L|G' -> (batches, threshold, less_equal)."""
    m = re.fullmatch(r"(\d+),(-?\d+\.?\d*),([GgLl])", re.sub(r"\s+", "", s))
    if not m:
        raise ValueError
    return int(m.group(1)), float(m.group(2)), m.group(3).lower() == "l"


def _trim_infinity(s):
    """'clip(lo,hi)' or 'second(lo,hi)' (bounds may be -inf/inf) -> (mode, lo, hi)."""
    m = re.fullmatch(rf"(clip|second)\(({_R}|-inf),({_R}|\+?inf)\)", re.sub(r"\s+", "", s).lower())
    if not m:
        raise ValueError
    return m.group(1), float(m.group(2)), float(m.group(3))


def _layer_ids(s):
    """'0' or '0,2' -> the list of layer ids."""
    text = re.sub(r"\s+", "", s)
    if not text:
        return []
    if not re.fullmatch(r"\d+(,\d+)*,?", text):
        raise ValueError
    return [int(x) for x in text.strip(",").split(",")]


def _false_or_count(s):
    """'false' or a positive integer (OPT's modify_batch_dim / export_parallel_batch)."""
    low = s.strip().lower()
    if low == "false":
        return False
    v = int(low)
    if v < 1:
        raise ValueError
    return v


_B = "true or false"
_FILE_NAME = "a name without '/', '\\' or '..' (outputs stay in output_dir)"

# ---- npuopt's fields (OPT's too, with its syntax) ------------------------------------------
register_field("graph", "", as_text, "the float IR graph file (.txt)", "a file path", is_path=True)
register_field("bin", "", as_text, "the IR weights file; default: the graph's name with .bin", "a file path", is_path=True)
register_field("model_name", "", safe_name, "name of the model in outputs; default: the IR's model_name",
               _FILE_NAME)
register_field("output_dir", "./npuopt_output", as_text, "folder for the quantized IR, reports and dumps", "a folder path", is_path=True)
register_field("out_ir_name", "", safe_name, "base name of the written IR (<out_ir_name>_o.txt); default: model_name",
               _FILE_NAME)
register_field("quant_ir_name", "", safe_name, "OPT's older name of out_ir_name; when set, it wins over out_ir_name",
               _FILE_NAME)
register_field("dataset", "", as_text, "dataset plugin class that reads calibration_data and data (see npuopt --plugin)", "a dataset plugin name")
register_field("calibration_data", "", as_text, "input data file for calibration, read by the dataset plugin", "a file path", is_path=True)
register_field("calibration_batch_size", "16", _int_in(1, 1 << 16), "batch size of calibration forwards", "an integer >= 1")
register_field("calibration_shuffe", "false", _bool, "shuffle the calibration data (OPT's spelling, kept)", _B)
register_field("metric", "", _name_list, "metric plugins, comma-separated, each with optional args: TopKMetric,TopKMetric(5)", "comma-separated plugin names like TopKMetric or TopKMetric(5)")
register_field("data", "", as_text, "input data file for metrics, read by the dataset plugin", "a file path", is_path=True)
register_field("label", "", as_text, "label file for metrics, read by the dataset plugin", "a file path", is_path=True)
register_field("metric_batch_size", "16", _int_in(1, 1 << 16), "batch size of metric forwards", "an integer >= 1")
register_field("dataloader_workers", "0", _int_in(0, 256), "worker processes of the torch DataLoader (0: load in the main process)", "an integer >= 0")
register_field("data_batch_dim", "0", _int_in(0, 64), "the batch axis of the data a dataset yields (set on the dataset class as data_batch_dim; a dataset with another axis than 0 defines collate_fn)", "an integer >= 0")
register_field("label_batch_dim", "0", _int_in(0, 64), "the batch axis of the labels (set on the dataset class as label_batch_dim)", "an integer >= 0")
register_field("without_batch_dim", "false", _bool, "the IR's inputs have no batch axis: batches of one sample, fed without the batch axis", _B)
register_field("eval_original_model", "true", _bool, "compute the metrics on the float model", _B)
register_field("eval_optimized_model", "true", _bool, "compute the metrics on the quantized model", _B)
register_field("skip_optimization", "false", _bool, "skip calibration, quantization and writing the IR (metrics of the float model only)", _B)
register_field("similarity_data_num", "4", _int_in(1, 1 << 16), "samples (of the first metric batch) used for the per-layer similarity of the report", "an integer >= 1")
register_field("quantize_method_for_weight", "per_tensor_symmetric_restricted_range", _method(*QUANTIZE_METHODS, *PER_BLOCK_METHODS),
               "how weights are quantized (per_block_*: layers with weight-only quantization, see trigger_float_op)",
               ", ".join(QUANTIZE_METHODS + PER_BLOCK_METHODS), per_layer=True)
register_field("weight_block_size", "256", _int_in(1, 1 << 20),
               "per_block_* weights: each output channel's weights (in the IR's order) in blocks of this many, "
               "each with its own scale and zero point (a last, shorter block where they do not divide)",
               "an integer >= 1", per_layer=True)
register_field("quantize_method_for_activation", "per_tensor_symmetric_full_range", _method(*QUANTIZE_METHODS),
               "how activations are quantized", ", ".join(QUANTIZE_METHODS), per_layer=True)
register_field("weight_bits", "8", _int_in(2, 16), "bits of quantized weights", "an integer from 2 to 16", per_layer=True)
register_field("activation_bits", "8", _int_in(8, 16), "bits of quantized activations", "an integer from 8 to 16", per_layer=True)
register_field("bias_bits", "32", _int_in(16, 48), "bits of quantized biases", "an integer from 16 to 48",
               per_layer=True)
register_field("quant_type", "disable", _choice(*QUANT_TYPES),
               "sets a layer's format at once: w8a8 = 8/8/32/8 activation/weight/bias/lut bits, w16a16 = 16/16/48/10, "
               "w4/w8 and w4afp16/w8afp16 (w4abfp16/w8abfp16) = weight-only 4/8-bit weights with "
               "float16 (bfloat16) activations, fp16/bf16 = float layers, wfp8afp8 (= wfp8e4m3afp8e4m3) and "
               "wfp8e5m2afp8e5m2 = scaled fp8 activations and weights on Convolution, DepthwiseConv, "
               "FullyConnected, MatMul, Input, Constant and the moving layers (8-bit integers elsewhere), "
               "w4afp8e4m3 (wfp4afp8e4m3) = fp8 activations with 4-bit integer (float4_e2m1fn) FullyConnected "
               "weights, wfp4/wfp4afp16/wfp4abfp16/wfp4afp32 = weight-only float4_e2m1fn weights; disable: the "
               "other fields",
               ", ".join(QUANT_TYPES), per_layer=True)
register_field("multiplier_bits", "", _multiplier_bits,
               "bits of rescale multipliers; empty: the activation bits (at most 15), as the tool chain does",
               "empty or an integer from 2 to 15", per_layer=True)
register_field("unify_shifts_for_aiff", "true", _bool,
               "per-channel rescales share one shift (the NPU's AIFF unit needs it); false: a shift per channel",
               _B, per_layer=True)
register_field("lut_items_in_bits", "8", _int_in(6, 16), "a lookup table has 2**lut_items_in_bits entries", "an integer from 6 to 16", per_layer=True)
register_field("calibration_strategy_for_weight", "extrema", _strategy, "how weight statistics become a quantization range",
               _STRATEGY_ACCEPTS, per_layer=True, unsupported=_strategy_unsupported)
register_field("calibration_strategy_for_activation", "mean", _strategy, "how activation statistics become a quantization range",
               _STRATEGY_ACCEPTS, per_layer=True, unsupported=_strategy_unsupported)
register_field("running_statistic_momentum", "0.9", _float_in(0.0, 1.0), "momentum of running-average statistics over calibration batches", "a number from 0 to 1", per_layer=True)
register_field("histc_bins", "2048", _int_in(16, 1 << 20), "histogram bins per tensor, used by kld/mse/percentile", "an integer >= 16", per_layer=True)
register_field("trim_infinity_before_statistic", "clip(-inf, inf)", _trim_infinity,
               "values a tensor's statistics see: clip(lo,hi) clamps to [lo,hi]; second(lo,hi) clamps to the "
               "smallest/largest value strictly inside (min(lo,0), max(hi,0)); the forward is unchanged",
               "clip(lo,hi) or second(lo,hi), bounds numbers or -inf/inf", per_layer=True)
register_field("statistic_file", "", as_text, "save calibration statistics here, or load them from here when it exists", "a file path", is_path=True)
register_field("save_statistic_info", "false", _bool, "also save the statistics as <output_dir>/<model_name>_statistic_info.npy", _B)
register_field("opt_config", "", as_text, "JSON file of per-layer overrides (see the written <name>_opt_template.json)", "a file path", is_path=True)
register_field("trigger_float_op", "disable", _float_ops,
               "layers kept in float: 'disable', comma-separated layer types/names, or OPT's float modes "
               "(float16_preferred, bfloat16_preferred, float32_preferred, with '!' and per layer); "
               "float16_act_int_wht (and bfloat16_/float32_): float activations, integer weights of "
               "weight_bits with weights_scale/weights_zp (weight-only quantization, per_block_* methods too); "
               "*_act_fp8e4m3fn_wht, *_act_fp4e2m1fn_wht: the same with float8_e4m3fn, float4_e2m1fn weights",
               "'disable', comma-separated layer types/names, or a float mode like float16_preferred",
               global_of=lambda pl: [])
register_field("set_qinvariant_for_start_nodes", "", _layer_ids,
               "layer ids of Input/Constant layers whose values are kept as they are (scale 1, zero point 0: indices)",
               "comma-separated layer ids like 0 or 0,2")
register_field("enable_pass_merge_matmul_mul", "true", _bool,
               "stage-1 pass: a Mul by one positive constant (or such a scaling BatchNorm) before a MatMul's operand "
               "or after its output, with only shape-moving layers between, becomes the MatMul's fused_multiplier, "
               "folded into its rescale (one requantization fewer)", _B)
register_field("resize_degrade_to_nearest", "false", _bool, "Resize layers use the nearest method instead of their own", _B, per_layer=True)
register_field("global_calibration", "auto", _global_calibration,
               "global calibration methods run on the whole graph with the calibration data (docs/global-calibration.md); "
               "auto: GPTQ where weights are per tensor, below 8 bits or fp8/fp4",
               "auto, none, or methods like equalization & adaround[0,500] joined by &", unsupported=unknown_global_calibrations)
register_field("mixed_precision_auto_search", "0,0.,L", _mixed_precision,
               "OPT's naive search: scored with the first metric on the first `batches` metric batches, the layers "
               "from one split on get 16-bit activations/weights, 48-bit biases, 10-bit tables (else float) until the "
               "drop from float is <= threshold (L) or >= it (G); batches 0: off",
               "batches,threshold,L or G (like 1,0.02,L)")


def _candidates(s):
    """Candidate names (quant/candidates.py), as written without spaces."""
    parse_candidates(s)
    return re.sub(r"\s+", "", s)


register_field("mixed_precision_candidates", "", _candidates,
               "npuopt's mixed-precision search: the formats a layer may take besides its settings (w4, w8, w16: "
               "weight bits; a8, a16: activation bits; w4a16...; float16, bfloat16, float32: kept in float; "
               "float16_w4[b32]: weight-only, per block of 32); the choice meets the mixed_precision_* budgets "
               "with the least output error, measured on calibration data; empty: no search",
               "comma-separated names like w4,w8 or w8,a16,float16")
register_field("mixed_precision_weight_bits", "0", _float_in(0, 32),
               "mixed-precision budget: average bits of the weights, weighted by parameter count (0: none)",
               "a number from 0 to 32")
register_field("mixed_precision_weight_bytes", "0", _float_in(0, float("inf")),
               "mixed-precision budget: bytes of the stored weights (0: none)", "a number of bytes, 0 or more")
register_field("mixed_precision_bitops", "0", _float_in(0, float("inf")),
               "mixed-precision budget: giga bit-operations per sample, weighted layers' multiply-accumulates times "
               "their weight and input bits (0: none)", "a number, 0 or more")
register_field("mixed_precision_conversions", "-1", _int_in(-1, 1 << 30),
               "mixed-precision budget: Quantize/DeQuantize layers in the quantized graph (-1: none)",
               "an integer, -1 or more")
register_field("mixed_precision_error", "0", _float_in(0, float("inf")),
               "mixed-precision budget: relative output error (squared error over squared float outputs) on the "
               "calibration samples; the smallest point predicted within it is chosen (0: none)",
               "a number, 0 or more")
register_field("mixed_precision_samples", "128", _int_in(0, 1 << 30),
               "calibration samples the mixed-precision search measures on, held in memory (0: all); with global "
               "calibration after calibration, taken after the first half of the batches, where it learns roundings",
               "an integer, 0 or more")
register_field("mixed_precision_points", "12", _int_in(3, 1000),
               "points of the mixed-precision front measured and written (the chosen one among them)",
               "an integer from 3 to 1000")
# quantization-aware fine-tuning (OPT's QAT names where they mean the same; npuopt/fine_tuning.py)
register_field("train_data", "", as_text,
               "data to fine-tune the quantized model on, read by the dataset plugin; when set, fine-tuning runs after "
               "calibration (and global calibration), through the exact integer forward", "a file path", is_path=True)
register_field("train_label", "", as_text, "labels of train_data (only a train plugin's loss reads them; npuopt's own "
               "fine-tuning distills the float model's outputs)", "a file path", is_path=True)
register_field("train_batch_size", "16", _int_in(1, 1 << 16), "samples per fine-tuning step", "an integer >= 1")
register_field("train_shuffle", "true", _bool, "shuffle train_data each epoch (a fixed seed per epoch)", _B)
register_field("train", "", as_text, "a Train plugin (OPT's QAT training loop, see npuopt --plugin) called with the "
               "trainable quantized model and a DataLoader of train_data/train_label; empty: npuopt's distillation",
               "a Train plugin name, optionally with args: MyLoop or MyLoop(3,0.1)")
register_field("train_ranges", "frozen", _choice("frozen", "weights"),
               "fine-tuning: frozen keeps every grid's range as calibrated; weights also learns the weights' "
               "ranges (per channel, block or tensor, as their scales; LSQ's gradient; at 1/20 of the learning "
               "rate)", "frozen, weights")
register_field("train_epochs", "8", _int_in(1, 1 << 20), "epochs of npuopt's fine-tuning over train_data",
               "an integer >= 1")
register_field("train_learning_rate", "0.02", _float_in(0, float("inf")),
               "Adam's learning rate of npuopt's fine-tuning, in steps of each weight's grid (and of each output's "
               "grid for the biases), decayed to 0 along a cosine", "a number, 0 or more")
register_field("train_holdout", "0.1", _float_in(0, 0.5),
               "share of train_data held out of npuopt's fine-tuning: the parameters kept are those of the epoch "
               "(or of the start) with the least output error on it (the later among equals), so fine-tuning never "
               "leaves that error higher than it found it; 0: the last epoch's", "a number from 0 to 0.5")
register_field("dump", "false", _bool, "write every tensor of the first batch as .npy into dump_dir", _B)
register_field("dump_dir", "", as_text, "folder for dumps; default: <output_dir>/dump", "a folder path", is_path=True)
register_field("device", "auto", _choice("cpu", "cuda", "auto"), "where forwards run: cpu, cuda, or auto (cuda when available)", "cpu, cuda, auto")


# ---- OPT's fields that change nothing off the chip -----------------------------------------
def _no_effect(name, default, parse, accepts, why, per_layer=False):
    register_field(name, default, parse, f"no effect in npuopt: {why}", accepts, no_effect=why, per_layer=per_layer)


_LIB = "a flag for the NPU's operator library, which npuopt does not drive"
_TILING = "feature-map tiling is decided by the chip's compiler, not by the quantizer"
_PASS = "npuopt does not run OPT's optional graph passes; the IR's layers are quantized as they are"
_DS = "dynamic shapes are a matter of the chip's runtime; npuopt writes the IR's static shapes"
_no_effect("cast_dtypes_for_lib", "false", _bool, _B, _LIB, per_layer=True)
_no_effect("perf_mode_for_lib", "true", _bool, _B, _LIB, per_layer=True)
_no_effect("min_compatible_zhouyi_target", "X2", _pattern(r"(z1|z2|z3|x1|x2|x3|x3p|x3s)(_\w*)?"),
           "Z1, Z2, Z3, X1, X2, X3, X3P, X3S (optionally _<config>)",
           "npuopt writes one tool chain format; the target's library and compiler are not its concern")
_no_effect("with_winograd", "false", _bool, _B, "Winograd convolution is an implementation choice of the chip's library", per_layer=True)
_no_effect("optimize_wdc_for_x2", "false", _bool, _B, "weight compression is done by the chip's compiler", per_layer=True)
_no_effect("featuremap_tiling_param", "", _pattern(r"|\[(\(\d+,\d+,\d+,\d+\),?)+\]"), "[(i,j,h,w),...]", _TILING)
_no_effect("featuremap_splits_item_x", "1", _int_in(1, 127), "an integer from 1 to 127", _TILING)
_no_effect("featuremap_splits_item_y", "1", _int_in(1, 127), "an integer from 1 to 127", _TILING)
_no_effect("featuremap_splits_concat_blk", "3", _int_in(1, 127), "an integer from 1 to 127", _TILING)
_no_effect("featuremap_splits_overlap_rate", "50", _float_in(0, 99), "a number from 0 to 99", _TILING)
_no_effect("featuremap_splits_sram_size", "0", _int_in(0, 8191), "an integer from 0 to 8191", _TILING)
_no_effect("enable_pass_convert_resize_to_convolution", "false", _bool, _B, _PASS, per_layer=True)
_no_effect("enable_pass_decompose_nonmonotonic_activations", "false", _bool, _B, _PASS, per_layer=True)
_no_effect("enable_pass_tune_op_complicated_activations", "[0][0]", _pattern(rf"(\[{_R}(,{_R})*\])+"), "[q,...][a,...]",
           "it tunes approximations of the chip's library for SiLU/GELU/Swish; npuopt uses its own", per_layer=True)
_no_effect("enable_pass_tune_op_softmax", "[0][0]", _pattern(rf"(\[{_R}(,{_R})*\])+"), "[q,...][a,...]",
           "it tunes approximations of the chip's library for Softmax; npuopt uses its own", per_layer=True)
_no_effect("enable_pass_deeply_set_unquantifiable", "false", _bool, _B, _PASS, per_layer=True)
_no_effect("enable_pass_split_qkv_fc_in_transformer", "false", _bool, _B, _PASS)
_no_effect("enable_pass_detect_inf_mask_nodes", "false", _bool, _B, _PASS)
_no_effect("enable_pass_scaled_dot_product_attention", "false", _bool, _B, _PASS)
_no_effect("ds_output_shape_constant", "disable", _pattern(r"disable|all|\[[01](,[01])*\]"), "disable, all or [0,1,...]", _DS, per_layer=True)
_no_effect("ds_parameter_constant", "disable", _choice("disable", "default"), "disable or default", _DS, per_layer=True)
_no_effect("write_similarity_to_ir", "false", _bool, _B, "per-layer similarity goes to the report json, not into the IR")
_no_effect("record_debug_acc_info", "false", _bool, _B, "per-layer similarity is always in the report json")
_COMPAT = ("an option of the tool chain's closed quantize_transform library; npuopt keeps a pre-quantized "
           "model's scales, zero points and integers as its IR states them")
_no_effect("compat_quantized_model_eliminate_cast", "true", _bool, _B, _COMPAT)
_no_effect("compat_quantized_model_strategy", "8bSymWeightUnchange",
           _choice("8bsymweightunchange", "8basymweightto16bsymweight", "sym", "asym", "fasymp", "fsym"),
           "8bSymWeightUnchange, 8bAsymWeightTo16bSymWeight, sym, asym, fasymp, fsym",
           _COMPAT)
_no_effect("compat_quantized_model_int8_to_uint8", "false", _bool, _B, _COMPAT)
_no_effect("compat_quantized_model_ops", "", as_text, "layer types", _COMPAT)
_no_effect("compat_quantized_model_unify_shifts_mode", "auto", _choice("max", "mean", "auto", "none", "entropy"),
           "max, mean, auto, none, entropy", _COMPAT)
_no_effect("compat_quantized_model_left_shift_bits", "8", _int_in(2, 15), "an integer from 2 to 15",
           _COMPAT)
_no_effect("compat_quantized_model_simplify_dequantize_quantize", "true", _bool, _B,
           _COMPAT)
_no_effect("compat_quantized_model_force_weight_asym", "false", _bool, _B,
           _COMPAT)
_no_effect("activation_block_size", "256", _int_in(1, 1 << 20), "an integer >= 1",
           "the tool chain quantizes activations per tensor or per channel, not per block", per_layer=True)


# ---- OPT's fields whose non-default values npuopt does not implement yet -------------------
register_field("qconfig", "", as_text, "a QConfig plugin (PluginType.QConfig, the tool chain's per-model "
               "quantization scripts) run once the layers' settings are resolved: the layer attrs it sets "
               "(trigger_float_op, q_bits_*, q_mode_*, q_strategy_*, ...) become their settings",
               "a QConfig plugin's class name")
register_field("bias_effective_bits", "", lambda s: _int_in(16, 48)(s) if s.strip() else "",
               "the high bits of biases that take part in the computation, as the chip's AIFF keeps them: each "
               "layer's biases lose the low bits that bring them into this many bits (zeroed); empty: bias_bits",
               "empty or an integer from 16 to 48", per_layer=True)
register_field("bias_effective_bits_auto_adaption", "false", _bool, "with bias_effective_bits: where clearing the "
               "low bits moves a layer's biases noticeably (KL over their softmax > 0.05), clamp them first to the "
               "width (19 bits up) that loses least to it, as the tool chain searches it", _B, per_layer=True)
register_field("remain_shift", "", lambda s: _int_in(0, 32)(s) if s.strip() else "",
               "Convolution, DepthwiseConv, Convolution3D and FullyConnected layers with more than 8-bit inputs or "
               "weights shift their accumulator down to 32 bits ahead of the rescale, leaving this many bits of its "
               "shift (the chip's AIFF); empty: no ahead shift", "empty or an integer from 0 to 32", per_layer=True)
register_field("force_dtype_int", "false", _bool, "layers whose outputs would be unsigned (a range without "
               "negative values) get signed integer outputs, as the tool chain's force_dtype_int does", _B,
               per_layer=True)
register_field("force_shift_positive", "false", _bool, "rescales get no negative shift: where the multiplier's "
               "bits cannot reach a ratio that large, the shift is 0 and the multiplier the largest (saturating), "
               "as the tool chain's force_shift_positive does", _B, per_layer=True)
register_field("fake_quant_scopes_for_debug", "", _pattern(r"|\[(\(\d+,\d+\),?)+\]"),
               "debugging: the layers of these layer-id ranges compute in float in the quantized forward of the "
               "metrics (inputs dequantized, outputs quantized again); the IR written is unchanged", "[(i,j),...]")
register_field("fake_quant_operators_for_debug", "", as_text,
               "debugging: layers of these types (comma-separated) compute in float in the quantized forward of "
               "the metrics, as fake_quant_scopes_for_debug", "comma-separated layer types")
register_field("unify_scales_for_concat", "false", _bool,
               "give each Concat's input branches the Concat's output range, so it copies integers instead of "
               "rescaling each branch", _B)
register_field("unify_scales_for_concat_threshold", "1.05", _float_in(1.0, float("inf")),
               "with unify_scales_for_concat: branch scales within this ratio count as equal (npuopt gives the "
               "branches identical grids, so any value holds)", "a number >= 1")
register_field("unify_scales_for_concat_max_depth", "20", _int_in(1, 1 << 20),
               "with unify_scales_for_concat: how far back branches are searched", "an integer >= 1")
register_field("unify_scales_for_multi_inputs_operators", "",
               _pattern(rf"|\[(\(\w+,\d+,{_R},(max|min|avg|out|skip),?\),?)+\]"),
               "give the input branches of layers of the listed types one grid (unify_scales_for_concat for any "
               "type): search_depth layers back (0: no limit), the largest (max), smallest (min) or mean (avg) of "
               "the branches' scales or the layer's output range (out); skip leaves them alone; npuopt gives the "
               "branches identical grids, so the threshold has nothing to ignore",
               "[(Type, search_depth, threshold, max|min|avg|out|skip), ...]", per_layer=True)
register_field("unify_scales_for_kvc_concat", "false", _bool,
               "key/value cache Concat layers (inputs from an Input or all-zero Constant and one other layer): the "
               "cache inputs take the other input's range, so the cache keeps one grid from step to step", _B,
               per_layer=True)
_PER_CHANNEL_ACT = ("npuopt quantizes activations per tensor (a per_channel_* activation method keeps the layer in "
                    "float, with a warning), so this per-channel activation option has nothing to act on")
_no_effect("activation_perchannel_min_elements", "1", _int_in(1, 1 << 30), "an integer >= 1", _PER_CHANNEL_ACT)
_no_effect("regularize_activation_perchannel_scales", "disable", _choice("disable", "enable"), "disable or enable",
           _PER_CHANNEL_ACT, per_layer=True)
register_field("ignore_missing_statistic", "false", _bool, "a tensor the statistic_file lacks takes the "
               "statistics of its layer's first input that has some (as the tool chain fills them from parents); "
               "false: such a file stops the run", _B)
register_field("modify_batch_dim", "false", _false_or_count, "the written IR's batch size (its tops' first axes, "
               "Reshape shapes and Slice bounds rewritten as the tool chain does); false: the float IR's",
               "false or an integer >= 1")
register_field("export_parallel_batch", "false", _false_or_count, "the written IR runs this many batches side by "
               "side: each input split along the batch axis, a copy of the layers per part, the outputs concatenated "
               "(as the tool chain writes it); false: one", "false or an integer >= 1")
register_field("compat_quantized_model", "false", _bool, "activations take the ranges the IR states (its "
               "layer_top_range: calibration strategy in_ir where it has them); an IR whose header says "
               "compat_quantized_model=true (the parser's of an already quantized model) keeps the source's scales, "
               "zero points and integers whatever this field says (the tool chain's own import runs a closed library)",
               _B)
_no_effect("enable_ds", "false", _bool, _B, _DS + " (the tool chain's 4.2 writes no IR field for it either)",
           per_layer=True)
