"""A cluster of one machine, and what a cluster needs.

:class:`~coded.cluster.local.LocalCluster` (``local.py``) starts a master and workers as
processes, on loopback or each behind a link of its own (:mod:`coded.links`), for ``coded local``,
the demo (``demo.py``), the tests and the benchmarks; ``certs.py`` makes the CA and certificates
of a TLS cluster, local or not (``coded certs``).
"""
