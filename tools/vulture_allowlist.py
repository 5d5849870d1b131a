"""Names vulture (the unused-code check of tests/test_house.py) cannot see used.

Each is used from outside this tree: by Python through a protocol or a test runner, or by users'
plugins through the Compass Optimizer's plugin API (OPT's own op files call these
PyNode/PyTensor/QuantMode members and register these plugin types). Nothing else
belongs here: unused code is deleted, unused required parameters start with '_'."""
# flake8: noqa
_ = object()

_.optionxform        # configparser reads option names through this hook
_.create_module      # importlib's loader protocol (npuopt/plugins.py)
_.graph_optimization_level  # ONNX Runtime's SessionOptions, read by ONNX Runtime (tools/make_detector_irs.py)
_.optimized_model_filepath

# OPT's plugin API (npuopt/node.py, npuopt/tensor.py, npuopt/utils, npuopt/registry.py)
_.approximated
_.force_dtype_int
_.current_batch_size
_.unquantifiable
_.replace_output_temporarily
_.ir_range
_.block_size
_.extrema_min
_.extrema_max
_.is_perchannel_scales
_.is_perchannel_zerops
_.is_perchannel_quantization
_.key_axis_broadcast_shape
_.is_qinvariant
_.set_qinvariant
_.clone_qinfo
_.is_qinfo_equal
_.fit_dtype
_.default_mode
_.to_per_tensor
_.to_per_block
_.to_symmetric
_.to_full_range
_.to_restricted_range
_.QConfig
_.Train
_.align_mode         # lookup_lut_powerof2's parameter in OPT's signature
_.set_ir_field
_.get_ir_field
_.get_ancestors
_.activation_type    # QuantType's queries
_.weight_type
_.bias_type
_._to_Dtype

# the Compass Optimizer's op-module helpers (npuopt/compass_ops), which users' op plugins import
_.apply_with_activation, _.apply_with_activation_quantize, _.with_activation_allow_merge_out_zerop_to_bias
_.unknown_activation, _.unknown_quantize, _.unknown_approx, _.sigmoid_approx, _.tanh_approx, _.silu_approx
_.sigmoid_forward, _.leakyrelu, _.prelu, _.selu, _.swish, _.shrink, _.thresholdedrelu, _.crelu
_.relu6_quantize, _.clip_quantize, _.leakyrelu_quantize, _.prelu_quantize, _.sigmoid_quantize, _.tanh_quantize
_.elu_quantize, _.selu_quantize, _.celu_quantize, _.hardswish_quantize, _.hardsigmoid_quantize, _.softplus_quantize
_.softsign_quantize, _.silu_quantize, _.swish_quantize, _.mish_quantize, _.gelu_quantize, _.shrink_quantize
_.thresholdedrelu_quantize, _.crelu_quantize
_.conv2d_quantize, _.linear_op_quantize, _.absorb_input_zp_to_bias_and_compress_bias_for_aiff
_.WinogradChecker, _.WinogradAllocator, _.eltwise_quantizes, _.batch_norm_quantize, _.groupnorm
_.groupnorm_quantize, _.inp_quantize, _.interp, _.interp_quantize, _.permute_quantize, _.pooling
_.pooling_quantize, _.select_forward, _.select_quantize, _.stridedslice, _.stridedslice_quantize
_.sinh_approx, _.softmax_approx

# parameters of aten ops' schemas: the exporter's handlers take them by name
_.implicit
_.cudnn_enabled
_.cudnn_enable
_.dropout_p
_.split_size
_.padding_idx
_.scale_grad_by_freq

# npuopt-export's MODEL factories, named on its command line (docs/export.md)
_.smollm2_135m

# torch.autograd.Function's ONNX export hook (tools/parser_cases/llm.py), found by name
_.symbolic

# pytest's hooks and markers, found by name
_.pytest_terminal_summary
_.pytestmark

# onnxruntime.quantization's CalibrationDataReader: quantize_static calls it by name
_.get_next
