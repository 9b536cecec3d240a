"""What a gradient job trains, and the numpy models: affine layers on one flat parameter vector.

:class:`Model` is the interface the master and the workers use: one flat float64 parameter
vector, a loss and gradient summed over samples, predictions, a regulariser the master adds once,
and the parameters by name for results. :class:`AffineModel` implements it for every numpy model
here: ``z = A_L(relu(... relu(A_1(x))))`` with affine layers ``A_l(h) = h W_l + b_l`` followed by a
loss head on ``z`` (squared error, logistic or softmax cross-entropy). The linear models are the
one-layer case, so one forward pass and one backpropagation serve them all. (PyTorch models,
:mod:`coded.ml.pytorch`, implement the same interface.)

Parameter layout of an affine model
-----------------------------------
A model with layer sizes ``(d_0, d_1, ..., d_L)`` (``d_0`` features, ``d_L`` outputs) stores, for
each layer l = 1..L in order, ``W_l`` of shape ``(d_{l-1}, d_l)`` in row-major order followed by
``b_l`` of shape ``(d_l,)``. :meth:`AffineModel.unflatten` returns views of these blocks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from coded.base.checks import check_real
from coded.ml.data.sparse import is_sparse

from .passes import Layer, backward, forward

__all__ = ["AffineModel", "Layer", "Model"]


def _real_array(name: str, value: Any, kinds: str = "iuf") -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in kinds:
        raise TypeError(f"{name} must be a real numeric array (got dtype {array.dtype})")
    return array


class Model(ABC):
    """A differentiable model on one flat float64 parameter vector whose loss and gradient are sums
    over samples.

    Sums make the partial gradients of disjoint data partitions add up exactly to the gradient of
    their union, which is what gradient codes encode.

    Attributes
    ----------
    name : str
    task : {"regression", "classification"}
    size : int
        Number of parameters.
    features : int
        Input features f of one (flattened) sample.
    classes : int
        Number of classes C (0 for regression).
    l2 : float
        Coefficient of :meth:`regularization`.
    """

    name: ClassVar[str]
    task: ClassVar[str]
    #: samples per gradient evaluation when a partition is computed piecewise (a worker checks for
    #: cancellation between pieces): about a millisecond or two of work each
    chunk: ClassVar[int] = 4096
    #: whether its gradient draws at random (dropout), so that it needs the samples' seed
    seeded: ClassVar[bool] = False
    #: the most the per-sample loss curves in the model's output z (the largest eigenvalue of its
    #: Hessian in z): with one affine layer, the mean loss curves at most this times the features'
    #: second moment (:mod:`coded.jobs.step_size`); None where no such bound holds (hidden layers)
    head_curvature: ClassVar[float | None] = None

    def __init__(self, size: int, features: int, classes: int, l2: float) -> None:
        self._size = size
        self._features = features
        self._classes = classes
        self._l2 = check_real("l2", l2, 0.0)

    @property
    def size(self) -> int:
        """Number of parameters."""
        return self._size

    @property
    def features(self) -> int:
        """Number of input features f."""
        return self._features

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one sample as the model sees it (its ``features`` values in C order)."""
        return (self._features,)

    @property
    def classes(self) -> int:
        """Number of classes C (2 for logistic regression, 0 for regression)."""
        return self._classes

    @property
    def l2(self) -> float:
        """Coefficient of the L2 regularizer."""
        return self._l2

    @abstractmethod
    def init_params(self, rng: np.random.Generator) -> np.ndarray:
        """Initial parameters, a function of ``rng`` alone.

        Returns
        -------
        params : (size,) ndarray of float64
            A new array.
        """

    @abstractmethod
    def loss_and_grad(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Loss and gradient summed over a batch (no regularizer).

        Parameters
        ----------
        params : (size,) array_like of float
        x : (b, features) array_like of float, or (b, features) csr_matrix of float64
            b may be 0. Sparse samples are computed on as they are (never densified).
        y : (b,) array_like
            Targets (regression) or class labels 0..C-1 (classification).

        Returns
        -------
        loss : float
            ``sum_i loss(params; x_i, y_i)``; 0.0 when b = 0.
        grad : (size,) ndarray of float64
            Its gradient with respect to ``params``; zeros when b = 0.

        Raises
        ------
        TypeError
            If an array is not real numeric.
        ValueError
            If the shapes do not fit the model or each other, or a label is out of range.
        """

    @abstractmethod
    def loss(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        """Loss summed over a batch, without the gradient (same arguments as :meth:`loss_and_grad`)."""

    @abstractmethod
    def predict(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Predictions for a batch x (b, features).

        Returns
        -------
        out : (b, C) ndarray or (b,) ndarray
            Class probabilities (rows sum to 1; binary models give (b, 2)), or the regression
            prediction.
        """

    def loss_and_predict(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """:meth:`loss` and :meth:`predict` of one batch, what a test score needs; a model that can
        shares one forward pass between them."""
        return self.loss(params, x, y), self.predict(params, x)

    @abstractmethod
    def regularization(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        """``(l2 / 2) * ||weights||^2`` and its gradient (biases excluded).

        Returns
        -------
        penalty : float
        grad : (size,) ndarray of float64
        """

    def add_regularization(self, params: np.ndarray, grad: np.ndarray) -> float:
        """Add :meth:`regularization`'s gradient to ``grad`` (shape (size,)) in place; returns its
        penalty. What the master adds to every decoded gradient."""
        penalty, reg_grad = self.regularization(params)
        grad += reg_grad
        return penalty

    @abstractmethod
    def arrays(self, params: np.ndarray) -> dict[str, np.ndarray]:
        """The parameters by name, in the model's own shapes (views of ``params`` where possible):
        what a job's result holds."""

    # --- validation ------------------------------------------------------------------------------

    def _check_shape(self, params: np.ndarray) -> None:
        if params.shape != (self._size,):
            raise ValueError(f"params must have shape ({self._size},) for {self!r} (got {params.shape})")

    def _params(self, params: Any) -> np.ndarray:
        params = _real_array("params", params).astype(np.float64, copy=False)
        self._check_shape(params)
        return params

    def _inputs(self, x: Any) -> np.ndarray:
        if is_sparse(x):  # checked where it was made (Dataset, an upload): only its fit here
            if x.format != "csr" or x.dtype != np.float64 or x.shape[1] != self.features:
                raise ValueError(f"sparse x must be a float64 CSR matrix of shape (b, {self.features}) for a model "
                                 f"with {self.features} features (got {x.format} {x.dtype} {x.shape})")
            return x
        x = _real_array("x", x, "biuf")
        if x.ndim != 2 or x.shape[1] != self.features:
            raise ValueError(f"x must have shape (b, {self.features}) for a model with {self.features} "
                             f"features (got {x.shape})")
        return x.astype(np.float64, copy=False)

    def _batch(self, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        x = self._inputs(x)
        y = _real_array("y", y, "biuf")
        if y.shape != (x.shape[0],):
            raise ValueError(
                f"y must have shape ({x.shape[0]},) to match x of shape {x.shape} (got {y.shape})")
        if self.task == "regression":
            return x, y.astype(np.float64, copy=False)
        bad = (y < 0) | (y >= self._classes)
        if y.dtype.kind == "f":
            bad |= np.floor(y) != y
        if bad.any():
            raise ValueError(f"y must hold class labels 0..{self._classes - 1} (got {y[bad][0]!r})")
        return x, y.astype(np.intp, copy=False)


    def work(self, samples: int, density: float = 1.0) -> float:
        """About how many multiply-adds :meth:`partial` takes for ``samples`` samples: a forward and
        a backward pass touch every parameter about twice per sample; of sparse samples (``density``:
        the share of their features stored) only the weights of stored features, but the gradient
        is a whole vector all the same."""
        return 2.0 * samples * self._size * density + self._size

    def check_repeatable(self) -> None:
        """Raise ValueError, naming the model, when two passes over the same samples with the same
        seed may give different gradients (then the holders of a partition disagree). The numpy
        models compute a pure function of their inputs; a PyTorch module is called to find out."""
        return None  # the numpy models' answer: nothing to refuse

    def partial(self, params: np.ndarray, x: np.ndarray, y: np.ndarray, seed: int | None = None) -> np.ndarray:
        """The summed gradient of ``(x, y)`` with the summed loss appended: shape (size + 1,).

        What a worker computes per data partition: appending the loss lets a gradient code decode
        the exact training loss along with the gradient. ``seed`` seeds the draws of random layers
        (dropout) for these samples (:func:`coded.ml.models.seeds.draw_seed`); models without
        random layers ignore it.
        """
        loss, grad = self.loss_and_grad(params, x, y)
        out = np.empty(grad.size + 1)
        out[:-1] = grad
        out[-1] = loss
        return out

    def prepare(self, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """A batch checked and converted once (what a worker holds): :meth:`accumulate` with
        ``prepared`` checks it no more at every round. Raises as :meth:`loss_and_grad`."""
        return self._batch(x, y)

    def accumulate(self, params: np.ndarray, x: np.ndarray, y: np.ndarray, out: np.ndarray, scale: float = 1.0,
                   seed: int | None = None, prepared: bool = False) -> None:
        """Add ``scale`` times :meth:`partial` of ``(x, y)`` to ``out``, shape (size + 1,), in place.

        What a worker's message is made of: a gradient code's message is a combination
        ``sum_j c_j g_j`` of its partitions' partial gradients, so each partition (or chunk of one)
        is added into the message itself, with its coefficient, instead of into arrays of its own
        that are combined afterwards. Models that can (:class:`AffineModel`) add without a
        temporary of the model's size. ``prepared``: ``(x, y)`` come from :meth:`prepare` (rows of
        it) and ``params`` are float64 of shape (size,): nothing is checked again.
        """
        part = self.partial(params, x, y, seed)
        if scale != 1.0:
            part *= scale
        out += part


class AffineModel(Model):
    """A stack of affine layers with ReLU between them and a loss head (see the module's notes).

    Subclasses set ``name`` and ``task`` and implement ``_head`` (summed loss and ``dL/dz``) and
    ``_output`` (predictions from ``z``).

    Parameters
    ----------
    layer_sizes : sequence of int
        ``(features, hidden..., outputs)``.
    l2 : float
        Coefficient of the regularizer ``(l2 / 2) * sum_l ||W_l||^2`` (biases are not penalised).
    classes : int
        Number of classes; 0 for regression.
    """

    def __init__(self, layer_sizes: Sequence[int], l2: float, classes: int) -> None:
        self._sizes = tuple(layer_sizes)
        size = sum((d_in + 1) * d_out for d_in, d_out in zip(self._sizes[:-1], self._sizes[1:], strict=True))
        super().__init__(size, self._sizes[0], classes, l2)
        # each layer's blocks in a flat vector: (W start, W end, W shape, b end), worked out once
        self._blocks: list[tuple[int, int, tuple[int, int], int]] = []
        start = 0
        for d_in, d_out in zip(self._sizes[:-1], self._sizes[1:], strict=True):
            self._blocks.append((start, start + d_in * d_out, (d_in, d_out), start + d_in * d_out + d_out))
            start += d_in * d_out + d_out

    @property
    def layer_sizes(self) -> tuple[int, ...]:
        """``(features, hidden..., outputs)``: the shapes of the parameter layout."""
        return self._sizes

    def __repr__(self) -> str:
        return f"{type(self).__name__}(features={self.features}, l2={self._l2})"

    def work(self, samples: int, density: float = 1.0) -> float:
        """As :meth:`Model.work`, less the pass over a whole gradient: it is added into in place."""
        first = self._sizes[0] * self._sizes[1]  # of sparse rows, only their stored features' weights
        return 2.0 * samples * (first * density + self._size - first)

    # --- public API: validation, then the hooks -------------------------------------------------

    def init_params(self, rng: np.random.Generator) -> np.ndarray:
        """Zeros (the convex models); the MLP draws its weights from ``rng``."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator (got {type(rng).__name__})")
        return np.zeros(self._size)

    def unflatten(self, params: np.ndarray) -> list[Layer]:
        """Views ``[(W_1, b_1), ..., (W_L, b_L)]`` of a parameter (or gradient) vector; no copies.

        Parameters
        ----------
        params : (size,) ndarray of float64

        Returns
        -------
        layers : list of ((d_in, d_out) ndarray, (d_out,) ndarray)
            Writing to them writes to ``params``.

        Raises
        ------
        TypeError
            If ``params`` is not a float64 ndarray (a conversion would copy).
        ValueError
            If its shape is not ``(size,)``.
        """
        if not isinstance(params, np.ndarray) or params.dtype != np.float64:
            got = params.dtype if isinstance(params, np.ndarray) else type(params).__name__
            raise TypeError(f"params must be a float64 ndarray (got {got})")
        self._check_shape(params)
        return self._layers(params)

    def _layers(self, params: np.ndarray) -> list[Layer]:
        """:meth:`unflatten` of a vector known to fit (every round's: checked where it came in)."""
        return [(params[start:end].reshape(shape), params[end:bias]) for start, end, shape, bias in self._blocks]

    def arrays(self, params: np.ndarray) -> dict[str, np.ndarray]:
        """``layer<i>.weights`` (d_in, d_out) and ``layer<i>.bias`` (d_out,), i = 0..L-1."""
        arrays = {}
        for index, (weights, bias) in enumerate(self.unflatten(self._params(params))):
            arrays[f"layer{index}.weights"], arrays[f"layer{index}.bias"] = weights, bias
        return arrays

    def loss_and_grad(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        grad = np.zeros(self._size)
        return self._loss_into(params, x, y, grad), grad

    def partial(self, params: np.ndarray, x: np.ndarray, y: np.ndarray, seed: int | None = None) -> np.ndarray:
        # the gradient added in place before the loss: a long one (sparse data) is not copied again
        out = np.zeros(self._size + 1)
        self.accumulate(params, x, y, out)
        return out

    def accumulate(self, params: np.ndarray, x: np.ndarray, y: np.ndarray, out: np.ndarray, scale: float = 1.0,
                   seed: int | None = None, prepared: bool = False) -> None:
        if not prepared and (out.shape != (self._size + 1,) or out.dtype != np.float64):
            raise ValueError(f"out must be float64 of shape ({self._size + 1},) (got {out.dtype} {out.shape})")
        out[-1] += self._loss_into(params, x, y, out[:-1], scale, prepared)

    def _loss_into(self, params: np.ndarray, x: np.ndarray, y: np.ndarray, grad: np.ndarray,
                   scale: float = 1.0, prepared: bool = False) -> float:
        """``scale`` times the summed loss; ``scale`` times its gradient added to ``grad`` (shape (size,))."""
        if not prepared:
            params = self._params(params)
            x, y = self._batch(x, y)
        if len(y) == 0:
            return 0.0
        layers = self._layers(params)
        inputs, z = forward(layers, x)
        loss, dz = self._head(z, y)
        if scale != 1.0:  # the samples' share of a combination: sum_j c_j g_j in one pass per partition
            dz *= scale
            loss *= scale
        backward(layers, inputs, dz, self._layers(grad))
        return loss

    def loss(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        params = self._params(params)
        x, y = self._batch(x, y)
        if len(y) == 0:
            return 0.0
        return self._head(forward(self.unflatten(params), x)[1], y)[0]

    def regularization(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        params = self._params(params)
        grad = np.zeros(self._size)
        if self._l2 == 0.0:
            return 0.0, grad
        penalty = 0.0
        for (weights, _), (grad_weights, _) in zip(self.unflatten(params), self.unflatten(grad), strict=True):
            penalty += float(np.sum(weights * weights))
            np.multiply(weights, self._l2, out=grad_weights)
        return 0.5 * self._l2 * penalty, grad

    def add_regularization(self, params: np.ndarray, grad: np.ndarray) -> float:
        """In place, layer by layer: no array of the model's size but one weight block's product."""
        params = self._params(params)
        if self._l2 == 0.0:
            return 0.0
        penalty = 0.0
        for (weights, _), (grad_weights, _) in zip(self.unflatten(params), self.unflatten(grad), strict=True):
            flat = weights.reshape(-1)
            penalty += float(np.dot(flat, flat))
            grad_weights += self._l2 * weights
        return 0.5 * self._l2 * penalty

    def predict(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        params = self._params(params)
        x = self._inputs(x)
        return self._output(forward(self.unflatten(params), x)[1])

    def loss_and_predict(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        params = self._params(params)
        x, y = self._batch(x, y)
        z = forward(self.unflatten(params), x)[1]  # one pass over x: a test set can be the size of the data
        return (self._head(z, y)[0] if len(y) else 0.0), self._output(z)

    # --- hooks -----------------------------------------------------------------------------------

    @abstractmethod
    def _head(self, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Summed loss of outputs z (b, d_L) and ``dL/dz`` (b, d_L)."""

    @abstractmethod
    def _output(self, z: np.ndarray) -> np.ndarray:
        """Predictions from outputs z (b, d_L)."""

