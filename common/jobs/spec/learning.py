"""What a gradient job trains: its ``model``, ``data`` and ``optimizer`` (with its ``schedule``)
sections, each a union told apart by its ``type`` (:mod:`coded.jobs.build` makes the objects)."""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from coded.jobs.spec.base import MAX_ITERATIONS, Strict, Upload

__all__ = [
    "DEFAULT_OPTIMIZER",
    "MAX_FEATURES",
    "MAX_TRAIN_VALUES",
    "UPLOADED",
    "AdamOptimizer",
    "AdamWOptimizer",
    "AmazonLikeData",
    "CategoricalData",
    "ConstantSchedule",
    "CosineSchedule",
    "DataSpec",
    "DigitsData",
    "FileData",
    "GaussianMixtureData",
    "ImageData",
    "LinearData",
    "LinearModel",
    "LogisticModel",
    "MLPModel",
    "ModelSpec",
    "NesterovOptimizer",
    "OneFile",
    "OptimizerSpec",
    "SGDOptimizer",
    "ScheduleSpec",
    "SoftmaxModel",
    "StepSchedule",
    "TorchModel",
]

MAX_TRAIN_VALUES = 500_000_000  # samples x features of generated data
#: columns of sparse data (svmlight, CSR): a model's parameters grow with them
MAX_FEATURES = 100_000_000


# --- model ---------------------------------------------------------------------------------------


class _Model(Strict):
    """A model section; ``CLASSES`` says which data it fits: (fewest, most classes, in words)."""

    CLASSES: ClassVar[tuple[int, float, str]] = (2, math.inf, "at least 2 classes")
    l2: float = Field(0.0, ge=0, allow_inf_nan=False)
    type: str  # each model narrows it to the Literal that names it (declared after l2: the field order stays)

    def check_classes(self, classes: int) -> None:
        """ValueError naming the field when the model does not fit data with ``classes`` classes
        (0: regression data)."""
        low, high, need = self.CLASSES
        if not low <= classes <= high:
            raise ValueError(f"model.type: {self.type} needs {need} (the data have "
                             + (f"{classes} classes)" if classes else "no classes: regression)"))


class LinearModel(_Model):
    CLASSES = (0, 0, "regression data (data.type linear, or a file with real targets)")
    type: Literal["linear"]


class LogisticModel(_Model):
    CLASSES = (2, 2, "exactly 2 classes (use softmax for more)")
    type: Literal["logistic"]


class SoftmaxModel(_Model):
    type: Literal["softmax"]


class MLPModel(_Model):
    type: Literal["mlp"]
    hidden: list[Annotated[int, Field(ge=1, le=65536)]] = Field(default_factory=lambda: [64], max_length=16)


#: a value of a torch architecture's keyword argument
TorchArg = Annotated[
    bool | int | float | Annotated[str, Field(max_length=256)]
    | Annotated[list[int | float], Field(max_length=64)], Field(union_mode="left_to_right")]


class TorchModel(_Model):
    """A PyTorch architecture registered on the master and the workers (:mod:`coded.ml.pytorch`)."""

    type: Literal["torch"]
    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$",
                      description="architecture: mlp, lenet, resnet, or one a coded.models plugin registers")
    args: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")], TorchArg] = Field(
        default_factory=dict, max_length=32, description="keyword arguments of the architecture")
    input_shape: list[Annotated[int, Field(ge=1, le=1 << 16)]] | None = Field(
        None, min_length=1, max_length=4, description="one sample's shape (default: the data's, e.g. C, H, W)")
    classes: int | None = Field(None, ge=2, le=100_000, description="outputs (default: the data's classes)")
    dtype: Literal["float32", "float64"] = Field("float32", description="what the workers compute in")

    @property
    def capability(self) -> str:
        """What a worker must have to compute for this model (see ``RegisterWorkerRequest.models``)."""
        return f"torch/{self.name}"


ModelSpec = Annotated[LinearModel | LogisticModel | SoftmaxModel | MLPModel | TorchModel, Field(discriminator="type")]


# --- data ----------------------------------------------------------------------------------------


class GaussianMixtureData(Strict):
    type: Literal["gaussian_mixture"]
    samples: int = Field(10000, ge=2, le=50_000_000)
    features: int = Field(100, ge=1, le=1_000_000)
    classes: int = Field(2, ge=2, le=1000)
    seed: int = Field(0, ge=0)

    @property
    def known_classes(self) -> int | None:
        return self.classes


class LinearData(Strict):
    type: Literal["linear"]
    samples: int = Field(10000, ge=2, le=50_000_000)
    features: int = Field(100, ge=1, le=1_000_000)
    noise: float = Field(0.1, ge=0)
    seed: int = Field(0, ge=0)

    @property
    def known_classes(self) -> int | None:
        return 0


class DigitsData(Strict):
    type: Literal["digits"]
    seed: int = Field(0, ge=0)

    @property
    def known_classes(self) -> int | None:
        return 10


class OneFile(Strict):
    """Data in one file the client uploads with the job; a test set is held out unless it has one."""

    path: Upload = Field(description="uploaded by the client with the job")
    test_fraction: float = Field(0.2, ge=0, lt=1, description="held out (seeded) when the file has no test set")

    @property
    def known_classes(self) -> int | None:
        """Unknown until the file is read (checked then)."""
        return None


class FileData(OneFile):
    type: Literal["npz", "csv", "svmlight"]
    features: int | None = Field(None, ge=1, le=MAX_FEATURES,
                                 description="svmlight: columns (default: the largest index in the file + 1)")
    zero_based: bool = Field(False, description="svmlight: indices start at 0 (default: at 1, as libsvm writes)")
    normalize: Literal["standardize", "none"] = Field(
        "none", description="npz, csv: standardize each feature with the training rows' mean and standard deviation "
                            "(the test rows too); none: as the file has them (a submission warns when their scales "
                            "differ by orders of magnitude)")

    @model_validator(mode="after")
    def _svmlight_fields(self) -> FileData:
        if self.type != "svmlight" and (self.features is not None or self.zero_based):
            raise ValueError(f"features and zero_based describe svmlight files (type: {self.type} has its own shape)")
        if self.type == "svmlight" and self.normalize != "none":
            raise ValueError("normalize: standardize centres each feature, which would make svmlight's sparse rows "
                             "dense: scale sparse features before writing the file")
        return self


#: a column name of a categorical CSV
ColumnName = Annotated[str, Field(min_length=1, max_length=256)]


class _Encoding(Strict):
    """How categorical columns become sparse features, as the gradient coding papers did
    (:func:`coded.ml.data.one_hot.encode`): each column and every combination of up to
    ``interactions`` columns one-hot encoded."""

    interactions: int = Field(2, ge=1, le=3, description="most columns combined into one interaction column "
                                                         "(1: the columns alone)")


class CategoricalData(OneFile, _Encoding):
    """A CSV of categorical columns (ids or words) and a label column: Kaggle's Amazon Employee
    Access ``train.csv`` as it is, or any such table."""

    type: Literal["categorical"]
    label: ColumnName = Field("ACTION", description="the label column (integer classes; -1/+1 become 0/1)")
    columns: list[ColumnName] | None = Field(None, min_length=1, max_length=64,
                                             description="the categorical columns (default: all but the label)")
    skip: list[Annotated[list[ColumnName], Field(min_length=2, max_length=2)]] = Field(
        default_factory=list, max_length=256, description="pairs of columns never combined (the papers' "
        "preprocessing: [[ROLE_ROLLUP_1, ROLE_ROLLUP_2], [ROLE_TITLE, ROLE_FAMILY]])")


class AmazonLikeData(_Encoding):
    """Synthetic data of the shape of the Amazon Employee Access file, encoded as the papers did
    (:func:`coded.ml.data.amazon.amazon_like`): not the real data."""

    type: Literal["amazon_like"]
    rows: int = Field(32769, ge=2, le=2_000_000, description="rows of the file (the real one has 32,769)")
    positive: float = Field(0.94, gt=0, lt=1, description="share of positive labels")
    seed: int = Field(0, ge=0, lt=2**32)
    test_fraction: float = Field(0.2, ge=0, lt=1, description="held out (seeded by the job)")

    @property
    def known_classes(self) -> int | None:
        return 2


class ImageData(Strict):
    type: Literal["images"]
    format: Literal["npz", "idx", "cifar10"]
    train: list[Upload] = Field(
        min_length=1, max_length=16, description="npz: one file (x, y); idx: images, labels; cifar10: batch files")
    test: list[Upload] = Field(default_factory=list, max_length=16)
    normalize: Literal["per_channel", "none"] = "per_channel"
    test_fraction: float = Field(0.2, ge=0, lt=1, description="held out (seeded) when there is no test set")

    @property
    def known_classes(self) -> int | None:
        return None

    def files(self) -> dict[str, str]:
        """The files to upload, each with the field that names it (``data.train[0]``, ...)."""
        return {path: f"data.{split}[{i}]" for split, paths in (("train", self.train), ("test", self.test))
                for i, path in enumerate(paths)}


DataSpec = Annotated[GaussianMixtureData | LinearData | DigitsData | FileData | CategoricalData | AmazonLikeData
                     | ImageData, Field(discriminator="type")]
#: data that the client uploads and the master streams to the workers (the rest is generated)
UPLOADED = (OneFile, ImageData)


# --- optimizer -----------------------------------------------------------------------------------


class ConstantSchedule(Strict):
    type: Literal["constant"]
    warmup: int = Field(0, ge=0, le=MAX_ITERATIONS, description="linear warm-up over this many steps")


class StepSchedule(Strict):
    type: Literal["step"]
    warmup: int = Field(0, ge=0, le=MAX_ITERATIONS)
    every: int = Field(ge=1, le=MAX_ITERATIONS, description="multiply by gamma every this many steps")
    gamma: float = Field(0.1, gt=0, le=1)


class CosineSchedule(Strict):
    type: Literal["cosine"]
    warmup: int = Field(0, ge=0, le=MAX_ITERATIONS)
    floor: float = Field(0.0, ge=0, le=1, description="final factor of the learning rate")


ScheduleSpec = Annotated[ConstantSchedule | StepSchedule | CosineSchedule, Field(discriminator="type")]


class _Optimizer(Strict):
    lr: float = Field(gt=0, allow_inf_nan=False)
    batch: int | None = Field(None, ge=1, le=1 << 24, description="samples per partition and iteration; "
                                                                  "default: every sample (full batch)")
    schedule: ScheduleSpec | None = None


class SGDOptimizer(_Optimizer):
    type: Literal["sgd"]
    momentum: float = Field(0.0, ge=0, lt=1, description="heavy ball (0: none)")
    weight_decay: float = Field(0.0, ge=0, allow_inf_nan=False)


class NesterovOptimizer(_Optimizer):
    type: Literal["nesterov"]
    momentum: float = Field(0.9, ge=0, lt=1)


class _AdamFields(_Optimizer):
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.999, ge=0, lt=1)
    eps: float = Field(1e-8, gt=0, allow_inf_nan=False)


class AdamOptimizer(_AdamFields):
    type: Literal["adam"]
    weight_decay: float = Field(0.0, ge=0, allow_inf_nan=False, description="decoupled (as AdamW)")


class AdamWOptimizer(_AdamFields):
    type: Literal["adamw"]
    weight_decay: float = Field(0.01, ge=0, allow_inf_nan=False, description="decoupled")


OptimizerSpec = Annotated[SGDOptimizer | NesterovOptimizer | AdamOptimizer | AdamWOptimizer,
                          Field(discriminator="type")]
#: the optimizer of a gradient job whose spec has no optimizer section (docs/jobs.md)
DEFAULT_OPTIMIZER = NesterovOptimizer(type="nesterov", lr=0.1)
