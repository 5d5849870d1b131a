"""Convolutions beyond the 2-D direct ones of core.py: ConvTranspose (the UNet
upsampling k=2 s=2, pads with output_padding, groups with dilation),
Convolution3D and ConvTranspose3D."""
from op_cases.common import Case, weights

AXES = {2: ("y", "x"), 3: ("z", "y", "x")}
PADS = {2: ("pad_top", "pad_bottom", "pad_left", "pad_right"),
        3: ("pad_z_begin", "pad_z_end", "pad_y_begin", "pad_y_end", "pad_x_begin", "pad_x_end")}


def conv_layer(b, rng, optype, name, bottom, cin, cout, kernel, stride, pads, dilation=None, group=1, act="NONE",
               **extra):
    """A layer of `optype` with the IR's weight layout: kernel/stride/dilation per axis
    (outermost first), pads (begin, end) per axis flattened."""
    dims = len(kernel)
    dilation = dilation or (1,) * dims
    params = {f"kernel_{a}": k for a, k in zip(AXES[dims], kernel)}
    params.update({f"stride_{a}": s for a, s in zip(AXES[dims], stride)})
    params.update({f"dilation_{a}": d for a, d in zip(AXES[dims], dilation)})
    params.update(dict(zip(PADS[dims], pads)))
    params.update(group=group, num_output=cout, with_activation=act, **extra)
    ir_kernel = tuple(kernel) if dims == 2 else (kernel[1], kernel[2], kernel[0])
    transposed = optype.startswith("ConvTranspose")
    shape = (cout // group,) + ir_kernel + (cin,) if transposed else (cout,) + ir_kernel + (cin // group,)
    constants = {"weights": weights(rng, *shape), "biases": weights(rng, cout, scale=0.2)}
    return b.layer(optype, name, [bottom], params, constants)[0]


def _deconv_unet(b, rng, x):
    return [conv_layer(b, rng, "ConvTranspose", "up", x[0], 8, 4, (2, 2), (2, 2), (0, 0, 0, 0), act="RELU",
                       output_padding_x=0, output_padding_y=0)]


def _deconv_pads(b, rng, x):
    return [conv_layer(b, rng, "ConvTranspose", "up", x[0], 3, 5, (3, 2), (2, 3), (1, 0, 0, 1),
                       output_padding_x=1, output_padding_y=1)]


def _deconv_grouped(b, rng, x):
    return [conv_layer(b, rng, "ConvTranspose", "up", x[0], 4, 6, (3, 3), (2, 1), (1, 1, 2, 2), dilation=(1, 2),
                       group=2, act="LEAKYRELU", negative_slope_type="float32", negative_slope_value=0.1)]


def _conv3d(b, rng, x):
    return [conv_layer(b, rng, "Convolution3D", "conv3d", x[0], 3, 4, (2, 3, 3), (1, 2, 1), (1, 0, 1, 1, 0, 2),
                       act="RELU6")]


def _conv3d_grouped(b, rng, x):
    return [conv_layer(b, rng, "Convolution3D", "conv3d", x[0], 4, 6, (3, 2, 3), (2, 1, 1), (1, 1, 0, 1, 2, 2),
                       dilation=(1, 2, 2), group=2)]


def _deconv3d(b, rng, x):
    return [conv_layer(b, rng, "ConvTranspose3D", "up3d", x[0], 4, 3, (2, 2, 2), (2, 2, 2), (0,) * 6, act="RELU"),
            conv_layer(b, rng, "ConvTranspose3D", "up3d_grouped", x[0], 4, 4, (3, 2, 3), (1, 2, 2),
                       (1, 0, 0, 1, 1, 1), dilation=(2, 1, 1), group=2)]


ASYM = dict(quantize_method_for_activation="per_tensor_asymmetric")
CASES = [
    Case("convtranspose", "ConvTranspose k=2 s=2 with fused RELU (UNet's upsampling)", [(4, 5, 8)], _deconv_unet),
    Case("convtranspose_pads", "ConvTranspose 3x2 kernel, strides 2/3, asymmetric pads, output_padding, "
         "asymmetric activations", [(4, 4, 3)], _deconv_pads, ASYM, calib_range=(-0.3, 2.0),
         run_range=(-0.3, 2.0)),
    Case("convtranspose_grouped", "ConvTranspose in 2 groups, dilation 2 along x, fused LEAKYRELU, "
         "per-channel weights", [(4, 4, 4)], _deconv_grouped,
         dict(quantize_method_for_weight="per_channel_symmetric_restricted_range")),
    Case("conv3d", "Convolution3D 2x3x3, stride 2 along y, asymmetric pads, fused RELU6", [(3, 5, 4, 3)], _conv3d),
    Case("conv3d_grouped", "Convolution3D in 2 groups with dilation, asymmetric activations",
         [(4, 5, 5, 4)], _conv3d_grouped, ASYM, calib_range=(-0.3, 2.0), run_range=(-0.3, 2.0)),
    Case("convtranspose3d", "ConvTranspose3D k=2 s=2, and one grouped with dilation and pads", [(2, 3, 3, 4)],
         _deconv3d),
]
