"""Generated gRPC stubs of the coded API (``coded.v1``); built from protos/ by ``make protos``."""
