"""Names vulture (the unused-code check of tests/test_house.py) cannot see used.

Each is used from outside this tree: by Python through a protocol or a test runner, or by users'
plugins through the Compass Optimizer's plugin API (OPT's own op files call these
PyNode/PyTensor/QuantMode members and register these plugin types). Nothing else
belongs here: unused code is deleted, unused required parameters start with '_'."""
# flake8: noqa
_ = object()

_.optionxform        # configparser reads option names through this hook
_.create_module      # importlib's loader protocol (npuopt/plugins.py)

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

# parameters of aten ops' schemas: the exporter's handlers take them by name
_.implicit
_.cudnn_enabled
_.cudnn_enable
_.dropout_p
_.split_size

# pytest's hooks and markers, found by name
_.pytest_terminal_summary
_.pytestmark
