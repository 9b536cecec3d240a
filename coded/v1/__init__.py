"""coded.v1 API stubs, generated from protos/coded/v1 (never edit the *_pb2*.py files)."""
