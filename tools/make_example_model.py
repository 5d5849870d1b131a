"""Generate the example model shipped in examples/tiny_cnn/.

A small CNN (conv, max/avg pooling, depthwise conv, residual add, concat,
reshape, softmax) trained for a few seconds to tell which quadrant of a
12x12 RGB image holds a bright square, written as a float IR with data and
labels. Run: python tools/make_example_model.py [OUT_DIR]
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from npuopt.ir.builder import GraphBuilder
from npuopt.ir import write_graph

SIZE = 12


def make_data(n, rng):
    x = rng.normal(0.0, 0.3, size=(n, 3, SIZE, SIZE)).astype(np.float32)
    y = rng.integers(0, 4, size=n)
    for i, q in enumerate(y):
        r0 = (q // 2) * (SIZE // 2) + rng.integers(0, SIZE // 2 - 3)
        c0 = (q % 2) * (SIZE // 2) + rng.integers(0, SIZE // 2 - 3)
        x[i, rng.integers(0, 3), r0:r0 + 3, c0:c0 + 3] += 2.0
    return x, y.astype(np.int64)


class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pw = nn.Conv2d(8, 8, 1)
        self.branch_a = nn.Conv2d(8, 4, 1)
        self.branch_b = nn.Conv2d(8, 4, 3, padding=1)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(x + self.pw(F.relu(self.dw(x))))
        x = torch.cat([F.relu(self.branch_a(x)), F.relu(self.branch_b(x))], 1)
        x = self.head(F.avg_pool2d(x, SIZE // 2))
        return torch.softmax(x.flatten(1), 1)


def train(model, x, y):
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(300):
        opt.zero_grad()
        loss = F.nll_loss(torch.log(model(xt) + 1e-9), yt)
        loss.backward()
        opt.step()
    model.eval()


def conv_params(conv: nn.Conv2d, act="NONE"):
    kh, kw = conv.kernel_size
    ph, pw = conv.padding
    return {"kernel_x": kw, "kernel_y": kh, "stride_x": conv.stride[1], "stride_y": conv.stride[0],
            "pad_left": pw, "pad_right": pw, "pad_top": ph, "pad_bottom": ph,
            "dilation_x": 1, "dilation_y": 1, "group": conv.groups, "num_output": conv.out_channels,
            "with_activation": act}


def conv_constants(conv: nn.Conv2d):
    return {"weights": conv.weight.detach().permute(0, 2, 3, 1), "biases": conv.bias.detach()}


def to_ir(model: TinyCNN):
    b = GraphBuilder("tiny_cnn")
    x = b.input("input", [1, SIZE, SIZE, 3])
    pool = dict(kernel_x=2, kernel_y=2, stride_x=2, stride_y=2, pad_left=0, pad_right=0, pad_top=0,
                pad_bottom=0, ceil_mode=False, method="MAX")
    (c1,) = b.layer("Convolution", "conv1", [x], conv_params(model.conv1, "RELU"), conv_constants(model.conv1))
    (p1,) = b.layer("Pooling", "pool1", [c1], pool)
    (dw,) = b.layer("Convolution", "dw", [p1], conv_params(model.dw, "RELU"), conv_constants(model.dw))
    (pw,) = b.layer("Convolution", "pw", [dw], conv_params(model.pw), conv_constants(model.pw))
    (add,) = b.layer("Eltwise", "add", [p1, pw], {"method": "ADD", "with_activation": "RELU"})
    (ba,) = b.layer("Convolution", "branch_a", [add], conv_params(model.branch_a, "RELU"), conv_constants(model.branch_a))
    (bb,) = b.layer("Convolution", "branch_b", [add], conv_params(model.branch_b, "RELU"), conv_constants(model.branch_b))
    (cat,) = b.layer("Concat", "concat", [ba, bb], {"axis": 3})
    gap = dict(pool, kernel_x=SIZE // 2, kernel_y=SIZE // 2, stride_x=1, stride_y=1, method="AVG",
               count_include_pad=False)
    (p2,) = b.layer("Pooling", "gap", [cat], gap)
    (head,) = b.layer("Convolution", "head", [p2], conv_params(model.head), conv_constants(model.head))
    (flat,) = b.layer("Reshape", "flatten", [head], {"shape": [1, 4]})
    (prob,) = b.layer("Softmax", "prob", [flat], {"axis": 1})
    return b.build([prob])


def main(out_dir):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x_train, y_train = make_data(2000, rng)
    model = TinyCNN()
    train(model, x_train, y_train)
    x, y = make_data(100, rng)
    with torch.no_grad():
        acc = (model(torch.from_numpy(x)).argmax(1).numpy() == y).mean()
    os.makedirs(out_dir, exist_ok=True)
    write_graph(to_ir(model), os.path.join(out_dir, "tiny_cnn.txt"))
    np.save(os.path.join(out_dir, "data.npy"), np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    np.save(os.path.join(out_dir, "labels.npy"), y)
    print(f"wrote {out_dir}: float top-1 of the PyTorch model on the shipped data: {acc:.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "examples", "tiny_cnn"))
