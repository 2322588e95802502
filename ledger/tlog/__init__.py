"""Pure: the transparency log's maths. RFC 9162 Merkle hashing, proof building and
proof verification, C2SP signed notes and checkpoints. Bytes and integers in; no I/O.
"""
