"""A run of traffic against a server, measured (``kvplan bench``) or predicted (``kvplan simulate``):
its files (``files``: the result JSON and the per-request records). Below sim and bench, which
both read it."""
