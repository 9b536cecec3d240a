"""The job schema (typed specs, the only configuration) and what is built from it: codes, data,
models, optimizers, faults, matrix inputs."""
