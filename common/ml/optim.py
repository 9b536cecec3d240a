"""Optimizers on flat parameter vectors whose state checkpoints and resumes bit-identically.

The master calls ``new = opt.step(params, grad)`` once per iteration, where ``grad`` is the decoded
full gradient evaluated at ``params`` (the point the workers were sent). :meth:`Optimizer.state_dict`
holds everything the next steps depend on besides the hyperparameters, so an optimizer built from
the same spec and given a saved state continues with exactly the same floating-point results.
Pure numpy: no I/O.

>>> import numpy as np

>>> opt = Nesterov(lr=0.1)
>>> w = np.array([1.0, -2.0])
>>> for _ in range(200):
...     w = opt.step(w, 2 * w)  # gradient of ||w||^2
>>> bool(np.abs(w).max() < 1e-6)
True
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from coded.base.checks import check_real
from coded.ml.schedules import Schedule

__all__ = ["SGD", "Adam", "Nesterov", "Optimizer"]


def _vector(name: str, value: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a real numeric array (got dtype {array.dtype})")
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D vector (got shape {array.shape})")
    return array.astype(np.float64, copy=False)


def _steps(value: Any) -> int:
    array = np.asarray(value)
    if array.shape != () or array.dtype.kind not in "iu":
        raise TypeError(f"state['steps'] must be an integer (got {value!r})")
    if int(array) < 0:
        raise ValueError(f"state['steps'] must be >= 0 (got {int(array)})")
    return int(array)


class Optimizer(ABC):
    """An optimizer: hyperparameters fixed at construction, a step counter and state buffers.

    Subclasses set ``name`` and ``buffers`` (the names of their state vectors, created as zeros
    at the first step) and implement ``_update``.
    """

    name: ClassVar[str]
    buffers: tuple[str, ...] = ()

    def __init__(self, lr: float, schedule: Callable[[int], float] = Schedule()) -> None:
        self._lr = check_real("lr", lr, 0.0, low_open=True)
        self._schedule = schedule
        self._steps = 0
        self._state: dict[str, np.ndarray] = {}

    @property
    def lr(self) -> float:
        """Base learning rate."""
        return self._lr

    @property
    def current_lr(self) -> float:
        """The learning rate of the next step: the base rate times the schedule's factor."""
        return self._lr * self._schedule(self._steps)

    @property
    def steps(self) -> int:
        """Steps taken so far (including those before a :meth:`load_state_dict`)."""
        return self._steps

    def step(self, params: np.ndarray, grad: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """One update.

        Parameters
        ----------
        params : (d,) array_like of float
            Current parameters; not modified.
        grad : (d,) array_like of float
            The gradient at ``params``; not modified.
        out : (d,) ndarray of float64, optional
            Where the new parameters are written (not ``params`` itself): the master reuses its
            arrays round after round. The same numbers as without it.

        Returns
        -------
        new_params : (d,) ndarray of float64
            ``out``, or a new array.

        Raises
        ------
        TypeError
            If an argument is not a real numeric array.
        ValueError
            If the shapes differ from each other or from the optimizer's state.
        """
        params, grad = _vector("params", params), _vector("grad", grad)
        if grad.shape != params.shape:
            raise ValueError(f"grad must have the shape of params {params.shape} (got {grad.shape})")
        if not self._state:
            self._state = {name: np.zeros(params.shape) for name in self.buffers}
        elif self.buffers and self._state[self.buffers[0]].shape != params.shape:
            raise ValueError(f"params of shape {params.shape} do not match the optimizer state of shape "
                             f"{self._state[self.buffers[0]].shape}")
        if out is not None and (out.shape != params.shape or out.dtype != np.float64 or np.shares_memory(out, params)):
            raise ValueError(f"out must be a float64 array of shape {params.shape} apart from params")
        new = self._update(params, grad, np.empty(params.shape) if out is None else out)
        self._steps += 1
        return new

    def state_dict(self) -> dict[str, np.ndarray | float | int]:
        """A copy of the state: ``{"steps": int}`` plus, once a step was taken, the buffers."""
        return {"steps": self._steps, **{name: array.copy() for name, array in self._state.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` (also after a round trip through ``np.savez``).

        Raises
        ------
        TypeError
            If ``state`` is not a mapping or an entry has the wrong type.
        ValueError
            For a missing or unknown key, or buffers of different shapes.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a mapping (got {type(state).__name__})")
        if "steps" not in state:
            raise ValueError("state is missing key 'steps'")
        steps = _steps(state["steps"])
        expected = {"steps", *self.buffers} if steps else {"steps"}
        for problem, keys in (("missing", expected - set(state)), ("has unknown", set(state) - expected)):
            if keys:
                raise ValueError(f"{self.name} state {problem} key(s) {sorted(keys)} (steps={steps})")
        buffers = {name: np.array(_vector(f"state[{name!r}]", state[name]), dtype=np.float64)
                   for name in self.buffers if name in expected}
        shapes = {name: array.shape for name, array in buffers.items()}
        if len(set(shapes.values())) > 1:
            raise ValueError(f"state buffers must have one shape (got {shapes})")
        self._steps, self._state = steps, buffers

    @abstractmethod
    def _update(self, params: np.ndarray, grad: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The new parameters, written into ``out`` (and returned); the buffers in ``self._state``
        are updated in place (:meth:`state_dict` hands out copies)."""


class SGD(Optimizer):
    """Gradient descent with optional heavy-ball momentum and weight decay (PyTorch's SGD):

    .. math::

        g'_t = g_t + \\lambda w_t, \\qquad v_t = \\mu v_{t-1} + g'_t, \\qquad w_{t+1} = w_t - \\mathrm{lr}_t\\, v_t,

    with v_0 = g'_0 (no momentum: w_{t+1} = w_t - lr_t g'_t). State: ``velocity`` (with momentum).
    """

    name = "sgd"

    def __init__(self, lr: float, momentum: float = 0.0, weight_decay: float = 0.0,
                 schedule: Callable[[int], float] = Schedule()) -> None:
        super().__init__(lr, schedule)
        self._momentum = check_real("momentum", momentum, 0.0, 1.0)
        self._decay = check_real("weight_decay", weight_decay, 0.0)
        self.buffers = ("velocity",) if self._momentum else ()

    def _update(self, params: np.ndarray, grad: np.ndarray, out: np.ndarray) -> np.ndarray:
        if self._decay:
            grad = grad + self._decay * params
        if self._momentum:
            velocity = self._state["velocity"]
            if self._steps == 0:
                velocity[...] = grad
            else:
                velocity *= self._momentum
                velocity += grad
            grad = velocity
        np.multiply(grad, self.current_lr, out=out)
        return np.subtract(params, out, out=out)


class Nesterov(Optimizer):
    """Nesterov's accelerated gradient with constant momentum mu.

    The classical form (Nesterov 1983; Sutskever et al. 2013) evaluates the gradient at the
    look-ahead point ``w_t + mu v_t``. We keep that look-ahead point as the parameters, so the
    gradient is taken at the parameters the workers receive (Bengio et al. 2013):

    .. math::

        v_{t+1} = \\mu v_t - \\mathrm{lr}\\, g_t, \\qquad
        w_{t+1} = w_t + \\mu v_{t+1} - \\mathrm{lr}\\, g_t, \\qquad v_0 = 0,

    with ``g_t`` the gradient at ``w_t``. State: ``velocity`` = v_t.

    Notes
    -----
    Tandon et al.'s released gradient-coding code uses the variant
    ``w_{t+1} = w_t + (t-1)/(t+2) (w_t - w_{t-1}) - lr g_t`` (an increasing momentum schedule).
    """

    name = "nesterov"
    buffers = ("velocity",)

    def __init__(self, lr: float, momentum: float = 0.9, schedule: Callable[[int], float] = Schedule()) -> None:
        super().__init__(lr, schedule)
        self._momentum = check_real("momentum", momentum, 0.0, 1.0)

    @property
    def momentum(self) -> float:
        return self._momentum

    def _update(self, params: np.ndarray, grad: np.ndarray, out: np.ndarray) -> np.ndarray:
        # v' = mu v - lr g;  w' = w + mu v' - lr g, in that order of operations, in place
        step = self.current_lr * grad
        velocity = self._state["velocity"]
        velocity *= self._momentum
        velocity -= step
        np.multiply(velocity, self._momentum, out=out)
        out += params
        return np.subtract(out, step, out=out)


class Adam(Optimizer):
    """Adam (Kingma and Ba 2015) with bias correction.

    .. math::

        m_t = \\beta_1 m_{t-1} + (1-\\beta_1) g_t, \\quad
        v_t = \\beta_2 v_{t-1} + (1-\\beta_2) g_t^2, \\quad
        w_t = w_{t-1} - \\mathrm{lr}\\, \\frac{m_t / (1-\\beta_1^t)}{\\sqrt{v_t / (1-\\beta_2^t)} + \\epsilon}

    for t = 1, 2, ... With ``weight_decay`` λ > 0 it is AdamW: ``- lr λ w_{t-1}`` is added to the
    step, decoupled from the adaptive scaling. State: ``m``, ``v``.
    """

    name = "adam"
    buffers = ("m", "v")

    def __init__(self, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.0, schedule: Callable[[int], float] = Schedule()) -> None:
        super().__init__(lr, schedule)
        self._decay = check_real("weight_decay", weight_decay, 0.0)
        self._beta1 = check_real("beta1", beta1, 0.0, 1.0)
        self._beta2 = check_real("beta2", beta2, 0.0, 1.0)
        self._eps = check_real("eps", eps, 0.0, low_open=True)

    def _update(self, params: np.ndarray, grad: np.ndarray, out: np.ndarray) -> np.ndarray:
        t = self._steps + 1
        m = self._beta1 * self._state["m"] + (1.0 - self._beta1) * grad
        v = self._beta2 * self._state["v"] + (1.0 - self._beta2) * grad * grad
        self._state["m"], self._state["v"] = m, v
        m_hat = m / (1.0 - self._beta1**t)
        v_hat = v / (1.0 - self._beta2**t)
        # AdamW (Loshchilov and Hutter 2019): weight decay decoupled from the adaptive step
        return np.subtract(params, self.current_lr * (m_hat / (np.sqrt(v_hat) + self._eps) + self._decay * params),
                           out=out)
