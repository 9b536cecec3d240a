"""Datasets (synthetic, bundled, user files) and their split into the partitions of a code.

Everything is deterministic given the seeds, so the master and every worker build the same
arrays from the job specification alone.

>>> from coded.ml.data import gaussian_mixture, partition_indices
>>> data = gaussian_mixture(samples=1000, features=10, seed=1)
>>> parts = partition_indices(len(data.y_train), 3, seed=0)
>>> [len(p) for p in parts]
[267, 267, 266]
"""

from .dataset import Dataset
from .digits import digits
from .files import load_file
from .images import load_images
from .partition import ORDERS, batch_rows, partition_indices
from .synthetic import Synthetic, gaussian_mixture, linear_recipe, linear_regression, mixture_recipe

__all__ = [
    "ORDERS",
    "Dataset",
    "Synthetic",
    "batch_rows",
    "digits",
    "gaussian_mixture",
    "linear_recipe",
    "linear_regression",
    "load_file",
    "load_images",
    "mixture_recipe",
    "partition_indices",
]
