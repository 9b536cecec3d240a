"""What crosses the network: tensors as chunks, gRPC servers and channels, the error-to-status
table."""
