"""The built-in architectures: the networks of gradient-coding experiments.

Each is a factory ``f(input_shape, classes, **args) -> nn.Module`` (see :mod:`coded.ml.pytorch`).
None keeps buffers that training changes (no BatchNorm running statistics): a worker's module is
rebuilt from the parameters of every call, so anything else it carried would differ between
workers. The ResNet normalises with GroupNorm, which is per sample and so keeps the loss a sum over
samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import Tensor, nn

__all__ = ["lenet", "mlp", "resnet"]


def _widths(name: str, value: Sequence[int] | int) -> list[int]:
    values = [value] if isinstance(value, int) else list(value)
    if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 65536 for v in values):
        raise ValueError(f"{name} must be widths between 1 and 65536 (got {value!r})")
    return values


def _image(name: str, input_shape: Sequence[int], smallest: int) -> tuple[int, int, int]:
    if len(input_shape) != 3 or min(input_shape[1:]) < smallest:
        raise ValueError(f"{name} takes images (C, H, W) of at least {smallest} x {smallest} pixels "
                         f"(got samples of shape {list(input_shape)})")
    channels, height, width = input_shape
    return channels, height, width


def _dropout(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"dropout must be a probability in [0, 1) (got {value!r})")
    return float(value)


def _hidden(features: int, widths: list[int], dropout: float) -> tuple[list[nn.Module], int]:
    """``Linear -> ReLU`` per width, each followed by ``Dropout(dropout)`` when it is not 0; and
    the last width."""
    layers: list[nn.Module] = []
    for out in widths:
        layers += [nn.Linear(features, out), nn.ReLU()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        features = out
    return layers, features


def mlp(input_shape: Sequence[int], classes: int, hidden: Sequence[int] | int = (128,),
        dropout: float = 0.0) -> nn.Module:
    """Flatten, then ``Linear -> ReLU`` per hidden width (then ``Dropout(dropout)`` if it is not
    0), then ``Linear`` to the classes.

    >>> mlp((1, 8, 8), 10, hidden=[32])
    Sequential(
      (0): Flatten(start_dim=1, end_dim=-1)
      (1): Linear(in_features=64, out_features=32, bias=True)
      (2): ReLU()
      (3): Linear(in_features=32, out_features=10, bias=True)
    )
    """
    layers, width = _hidden(math.prod(input_shape), _widths("hidden", hidden), _dropout(dropout))
    return nn.Sequential(nn.Flatten(), *layers, nn.Linear(width, classes))


def lenet(input_shape: Sequence[int], classes: int, channels: Sequence[int] = (6, 16),
          hidden: Sequence[int] = (120, 84), kernel: int = 5, dropout: float = 0.0) -> nn.Module:
    """LeNet-5's shape: two ``Conv(kernel, same padding) -> ReLU -> MaxPool(2)`` stages, then
    fully connected ``ReLU`` layers of widths ``hidden`` (each followed by ``Dropout(dropout)``
    if it is not 0) and a linear layer to the classes.

    Same padding keeps it usable on small images: 8 x 8 digits leave 2 x 2 maps, MNIST 7 x 7,
    CIFAR 8 x 8.
    """
    depth, height, width = _image("lenet", input_shape, 4)
    if not isinstance(kernel, int) or isinstance(kernel, bool) or kernel not in (1, 3, 5, 7):
        raise ValueError(f"kernel must be 1, 3, 5 or 7 (got {kernel!r})")
    convolutions = _widths("channels", channels)
    if len(convolutions) != 2:
        raise ValueError(f"channels must be two widths, one per convolution (got {channels!r})")
    layers: list[nn.Module] = []
    for out in convolutions:
        layers += [nn.Conv2d(depth, out, kernel, padding=kernel // 2), nn.ReLU(), nn.MaxPool2d(2)]
        depth, height, width = out, height // 2, width // 2
    dense, features = _hidden(depth * height * width, _widths("hidden", hidden), _dropout(dropout))
    return nn.Sequential(*layers, nn.Flatten(), *dense, nn.Linear(features, classes))


class _Block(nn.Module):
    """A basic residual block: two 3 x 3 convolutions with GroupNorm; a strided 1 x 1 projection
    on the shortcut when the shape changes."""

    def __init__(self, channels_in: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(math.gcd(8, channels), channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(math.gcd(8, channels), channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or channels_in != channels:
            self.shortcut = nn.Sequential(nn.Conv2d(channels_in, channels, 1, stride, bias=False),
                                          nn.GroupNorm(math.gcd(8, channels), channels))

    def forward(self, x: Tensor) -> Tensor:
        out = nn.functional.relu(self.norm1(self.conv1(x)))
        return nn.functional.relu(self.norm2(self.conv2(out)) + self.shortcut(x))


def resnet(input_shape: Sequence[int], classes: int, width: int = 16, blocks: Sequence[int] = (1, 1, 1)) -> nn.Module:
    """A small ResNet for 3 x 32 x 32 images (He et al.'s CIFAR family, GroupNorm for BatchNorm):
    a 3 x 3 stem of ``width`` channels, then stages of ``blocks[i]`` residual blocks with
    ``width * 2**i`` channels (stride 2 from the second stage on), global average pooling and a
    linear layer. ``blocks=(3, 3, 3)`` is ResNet-20; the default (1, 1, 1) is ResNet-8.
    """
    depth, _, _ = _image("resnet", input_shape, 4)
    (width,) = _widths("width", width)
    stages = _widths("blocks", blocks)
    if not 1 <= len(stages) <= 4 or max(stages) > 16:
        raise ValueError(f"blocks must be 1 to 4 stages of at most 16 blocks (got {list(blocks)})")
    layers: list[nn.Module] = [nn.Conv2d(depth, width, 3, 1, 1, bias=False), nn.GroupNorm(math.gcd(8, width), width),
                               nn.ReLU()]
    channels = width
    for stage, count in enumerate(stages):
        out = width * 2 ** stage
        for block in range(count):
            layers.append(_Block(channels, out, 2 if stage and not block else 1))
            channels = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes)]
    return nn.Sequential(*layers)
