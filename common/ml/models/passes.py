"""The forward pass and the backpropagation through a stack of affine layers with ReLU between
them (:class:`coded.ml.models.AffineModel`), the gradient added into arrays the caller owns."""

from __future__ import annotations

import numpy as np

from coded.ml.data.sparse import is_sparse

from .products import add_transposed_product

__all__ = ["Layer", "backward", "forward"]

#: One affine layer's blocks of a parameter (or gradient) vector: W (d_in, d_out) and b (d_out,).
Layer = tuple[np.ndarray, np.ndarray]


def forward(layers: list[Layer], x: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Inputs of every layer (x, then the ReLU activations) and the output z of the last one."""
    inputs = [x]
    for weights, bias in layers[:-1]:
        inputs.append(np.maximum(inputs[-1] @ weights + bias, 0.0))
    weights, bias = layers[-1]
    return inputs, inputs[-1] @ weights + bias


def backward(layers: list[Layer], inputs: list[np.ndarray], dz: np.ndarray, grads: list[Layer]) -> None:
    """Backpropagate ``dL/dz`` of the last layer, adding each layer's gradient to ``grads``."""
    for index in range(len(layers) - 1, -1, -1):
        grad_weights, grad_bias = grads[index]
        if is_sparse(inputs[index]):  # the first layer's input: added without a model-sized temporary
            add_transposed_product(inputs[index], dz, grad_weights)
        else:
            grad_weights += inputs[index].T @ dz
        grad_bias += np.sum(dz, axis=0)
        if index:
            dz = (dz @ layers[index][0].T) * (inputs[index] > 0)
