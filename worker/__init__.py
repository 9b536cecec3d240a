"""The worker: computes encoded gradients and block products for the master, and hosts CodeNet
peers (:mod:`coded.worker.peer`)."""
