"""The master: runs jobs on registered workers. Its core (runners, registry, store, service) talks
to workers through :mod:`coded.master.links`; only :mod:`coded.master.server` (the servicer) and
:mod:`coded.master.grpc_links` (the gRPC links to workers) know about gRPC."""
