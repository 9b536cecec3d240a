"""A registered PyTorch architecture behind the :class:`coded.ml.models.Model` interface.

Numerics: the parameters live in float64 on the master (the decode and the optimizer step are
float64); a worker casts them to the model's ``dtype`` (float32 by default), computes the summed
cross-entropy and its gradient in that dtype and returns them as float64. Every worker that holds
a partition computes its partial gradient from the same float32 parameters on the same samples, so
the code decodes the same sum an uncoded run adds up, to float64 rounding (~1e-16 relative); the
float32 arithmetic itself is common to both and does not enter the decode error.

Random layers (dropout) draw from torch's default generator, which a gradient pass seeds from the
samples' :func:`~coded.ml.models.seeds.draw_seed` (job seed, iteration, partition, first row):
every holder of a partition draws the same masks for it. Evaluation (:meth:`TorchModel.loss`,
:meth:`TorchModel.predict`) runs the module in eval mode, without them.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from coded.base.checks import check_int
from coded.ml.models import Model
from coded.ml.pytorch import factory

__all__ = ["DTYPES", "TorchModel"]

DTYPES = {"float32": torch.float32, "float64": torch.float64}
#: samples per forward pass when predicting (bounds the activations' memory)
PREDICT_CHUNK = 1024
#: held while a seeded pass draws from torch's default generator, which every model in the process shares
_DRAWS = threading.Lock()


class TorchModel(Model):
    """A classifier built by a registered factory (see :mod:`coded.ml.pytorch`).

    Parameters
    ----------
    architecture : str
        A registered name (built-in or ``coded.models`` entry point).
    input_shape : sequence of int
        The shape of one sample, e.g. (C, H, W); samples arrive flattened in C order.
    classes : int
        At least 2.
    args : mapping
        Keyword arguments of the factory.
    l2 : float
        Coefficient of ``(l2 / 2) * ||w||^2`` over the parameters with two or more dimensions
        (convolution and linear weights; not biases or normalisation scales).
    dtype : {"float32", "float64"}
        What the forward and backward passes compute in.
    device : str
        Where they run: "cpu", or e.g. "cuda" / "cuda:1" on a worker with a GPU. Results come back
        to the CPU as float64 either way.

    Raises
    ------
    ModuleNotFoundError
        Without PyTorch.
    LookupError
        For an unknown architecture.
    TypeError
        When the factory does not take one of ``args``.
    ValueError
        When the factory refuses a value of ``args`` or the shape, the module keeps buffers, or it
        does not map a batch of samples of ``input_shape`` to ``(batch, classes)`` logits.
    """

    name = "torch"
    seeded = True  # dropout draws from the samples' seed
    task = "classification"
    chunk = 128  # a convolutional network spends far longer per sample than the numpy models

    def __init__(self, architecture: str, input_shape: Sequence[int], classes: int,
                 args: Mapping[str, Any] | None = None, l2: float = 0.0, dtype: str = "float32",
                 device: str = "cpu") -> None:
        self.architecture = architecture
        self._input_shape = tuple(int(d) for d in input_shape)
        self.args = dict(args or {})
        self.dtype = DTYPES[dtype]
        self.device = torch.device(device)
        self._classes = check_int("classes", classes, 2)  # _build needs it before Model.__init__
        self._factory = factory(architecture)
        module = self._build(seed=0)
        self._module = module
        self._names = [name for name, _ in module.named_parameters()]
        self._shapes = [tuple(p.shape) for _, p in module.named_parameters()]
        sizes = [math.prod(shape) for shape in self._shapes]
        self._offsets = np.cumsum([0, *sizes]).tolist()
        self._decay = np.concatenate([np.full(n, len(s) >= 2) for n, s in zip(sizes, self._shapes, strict=True)]
                                     or [np.zeros(0, bool)])
        # one module, parameters bound per call: torch.func.functional_call swaps them in and out of
        # the module, so calls on this model (a straggler's late chunk, the next round) take turns
        self._lock = threading.Lock()
        super().__init__(sum(sizes), math.prod(self.input_shape), classes, l2)
        self._check_outputs()

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self._input_shape

    def work(self, samples: int, density: float = 1.0) -> float:
        """Unknown: a convolution reuses each weight at every position, so parameters say little."""
        return math.inf if samples else 0.0

    def __repr__(self) -> str:
        return (f"TorchModel({self.architecture!r}, input_shape={list(self.input_shape)}, classes={self.classes}, "
                f"args={self.args}, dtype={str(self.dtype).removeprefix('torch.')})")

    # --- building --------------------------------------------------------------------------------

    def _build(self, seed: int) -> nn.Module:
        """A fresh module whose initial weights are a function of ``seed`` alone."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                module = self._factory(self.input_shape, self._classes, **self.args)
            except TypeError as error:  # an argument the factory does not take
                raise TypeError(f"{self.architecture}: {error}") from None
        if not isinstance(module, nn.Module):
            raise ValueError(f"{self.architecture}: the factory returned a {type(module).__name__}, not a "
                             "torch.nn.Module")
        buffers = [name for name, _ in module.named_buffers()]
        if buffers:
            raise ValueError(f"{self.architecture}: the module keeps buffers ({', '.join(buffers[:3])}), e.g. "
                             "BatchNorm running statistics, which workers cannot keep consistent; use "
                             "GroupNorm or LayerNorm")
        return module.to(self.device, self.dtype)

    def _check_outputs(self) -> None:
        try:
            with torch.no_grad():
                out = self._module(torch.zeros((2, *self.input_shape), dtype=self.dtype, device=self.device))
        except (RuntimeError, ValueError) as error:
            raise ValueError(f"{self.architecture} does not take samples of shape {list(self.input_shape)}: "
                             f"{str(error).splitlines()[0]}") from None
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, self.classes):
            got = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"{self.architecture} maps 2 samples to outputs of shape {got}; it must give "
                             f"logits of shape [2, {self.classes}]")

    # --- the Model interface ---------------------------------------------------------------------

    def init_params(self, rng: np.random.Generator) -> np.ndarray:
        """The factory's own initialisation, under a torch seed drawn from ``rng``."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator (got {type(rng).__name__})")
        module = self._build(seed=int(rng.integers(2**63)))
        return np.concatenate([p.detach().to("cpu", torch.float64).reshape(-1).numpy() for p in module.parameters()])

    def loss_and_grad(self, params: np.ndarray, x: np.ndarray, y: np.ndarray,
                      seed: int | None = None) -> tuple[float, np.ndarray]:
        """As :meth:`Model.loss_and_grad`, in train mode: random layers draw from torch's default
        generator, seeded with ``seed`` for this pass when one is given."""
        params = self._params(params)
        x, y = self._batch(x, y)
        if len(y) == 0:
            return 0.0, np.zeros(self._size)
        flat = self._tensor(params).requires_grad_(True)
        with self._lock, self._draws(seed):
            self._module.train()
            loss = self._loss(flat, x, y)
            (grad,) = torch.autograd.grad(loss, flat)
        return float(loss.detach()), grad.to("cpu", torch.float64).numpy()

    def partial(self, params: np.ndarray, x: np.ndarray, y: np.ndarray, seed: int | None = None) -> np.ndarray:
        loss, grad = self.loss_and_grad(params, x, y, seed)
        return np.append(grad, loss)

    def loss(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        """The summed loss in eval mode (no dropout): what evaluation reports."""
        params = self._params(params)
        x, y = self._batch(x, y)
        if len(y) == 0:
            return 0.0
        with torch.no_grad(), self._lock:
            self._module.eval()
            return float(self._loss(self._tensor(params), x, y))

    def predict(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Class probabilities (b, C), float64."""
        flat = self._tensor(self._params(params))
        x = self._inputs(x)
        out = np.empty((len(x), self.classes))
        with torch.no_grad(), self._lock:
            self._module.eval()
            for start in range(0, len(x), PREDICT_CHUNK):
                logits = self._forward(flat, x[start:start + PREDICT_CHUNK])
                out[start:start + PREDICT_CHUNK] = torch.softmax(logits.to("cpu", torch.float64), dim=1).numpy()
        return out

    def regularization(self, params: np.ndarray) -> tuple[float, np.ndarray]:
        params = self._params(params)
        grad = np.where(self._decay, params * self._l2, 0.0)
        return 0.5 * float(np.dot(grad, params)), grad

    def arrays(self, params: np.ndarray) -> dict[str, np.ndarray]:
        """The module's parameters by their names in its state dict, in its own shapes."""
        params = self._params(params)
        return {name: params[start:end].reshape(shape) for name, shape, start, end
                in zip(self._names, self._shapes, self._offsets[:-1], self._offsets[1:], strict=True)}

    def check_repeatable(self) -> None:
        """Refuse a module whose gradient two seeded passes over the same samples do not repeat
        bit for bit: the holders of a partition would send copies that disagree.

        What seeding cannot reach makes them differ: a module that draws from a generator of its
        own, from numpy or Python's ``random``, or that runs nondeterministic kernels.

        Raises
        ------
        ValueError
            Naming the architecture as the cause.
        """
        rng = np.random.default_rng(0)
        params = self.init_params(rng)
        x = rng.standard_normal((8, self.features))
        y = rng.integers(self.classes, size=8)
        first, second = (self.partial(params, x, y, seed=1) for _ in range(2))
        if not np.array_equal(first, second):
            difference = float(np.abs(first - second).max() / max(np.abs(first).max(), np.finfo(float).tiny))
            raise ValueError(
                f"{self.architecture}: two passes over the same samples with the same seed give different "
                f"gradients (largest difference {difference:.1e} of the largest entry), so the workers holding a "
                "partition would disagree. Random layers must draw from torch's default generator (nn.Dropout, "
                "torch.rand), which coded seeds per partition; a generator of the module's own, numpy or "
                "Python random draws, and nondeterministic kernels cannot be seeded. Make the model repeatable, "
                "or run it uncoded (code: {scheme: uncoded})")

    # --- passes ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _draws(self, seed: int | None) -> Iterator[None]:
        """Seed torch's default generator for one pass and restore it afterwards (None: as it is)."""
        if seed is None:
            yield
            return
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        with _DRAWS, torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            yield

    def _forward(self, flat: torch.Tensor, x: np.ndarray) -> torch.Tensor:
        tensors = {name: flat[start:end].view(shape) for name, shape, start, end
                   in zip(self._names, self._shapes, self._offsets[:-1], self._offsets[1:], strict=True)}
        inputs = self._tensor(x).reshape(len(x), *self.input_shape)
        return torch.func.functional_call(self._module, tensors, (inputs,))

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        # a copy in the model's dtype: arrays from the wire are read-only, which torch tensors cannot be
        return torch.tensor(array, dtype=self.dtype, device=self.device)

    def _loss(self, flat: torch.Tensor, x: np.ndarray, y: np.ndarray) -> torch.Tensor:
        logits = self._forward(flat, x)
        labels = torch.tensor(y, dtype=torch.int64, device=self.device)
        return nn.functional.cross_entropy(logits, labels, reduction="sum")
