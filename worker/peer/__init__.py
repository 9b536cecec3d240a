"""CodeNet peers: masterless training among the peers of one job (docs/codenet.md).

``training`` holds the peer (:class:`~coded.worker.peer.training.CodeNetPeer`), ``mailbox`` its inbox
and messages, ``checkpoints`` its saved blocks, ``transport`` how it reaches the other peers
(``grpc_transport`` over gRPC, the only module here that knows gRPC), ``host`` the peers a worker
process runs.
"""
