"""The floor (pure): the exception root, canonical MessagePack, entries and their
hashes, the log's frame format, digests of arguments and outputs, the JSON Schemas.
"""
