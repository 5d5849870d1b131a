"""OPT's ops/convwinograd.py names that its conv.py uses. npuopt plans no Winograd
convolution (`with_winograd` is accepted with no effect): the checker never selects
one, and a layer that asks for one by its own param is convolved directly, which gives
what Winograd's transform computes. (Its ArcReactor, read only for layers the checker
selected, is not here.)"""
import torch
import torch.nn.functional as F


class WinogradChecker:
    @staticmethod
    def run(_node) -> bool:
        """Whether the layer is computed as a Winograd convolution: never in npuopt."""
        return False


def WinogradAllocator(self, inp: torch.Tensor, weights: torch.Tensor, bias) -> torch.Tensor:
    """The layer's convolution of NCHW `inp` with OIHW `weights` and `bias`: its padding
    (with the input's zero point, quantized), strides, dilations and groups."""
    p = {k: int(self.get_param(k)) for k in ("pad_left", "pad_right", "pad_top", "pad_bottom", "stride_x",
                                             "stride_y", "dilation_x", "dilation_y", "group")}
    pad_value = -float(torch.as_tensor(self.inputs[0].zerop).reshape(-1)[0]) if self.quantized else 0.0
    x = F.pad(inp, (p["pad_left"], p["pad_right"], p["pad_top"], p["pad_bottom"]), value=pad_value)
    return F.conv2d(x, weights, bias, stride=(p["stride_y"], p["stride_x"]),
                    dilation=(p["dilation_y"], p["dilation_x"]), groups=p["group"])
