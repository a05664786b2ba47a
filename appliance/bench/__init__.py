"""Benchmarks, one module per subject, each with ``main(argv) -> int``.

Every benchmark measures its alternatives side by side in one run and prints
``name=<value>`` as its last line so scripts can pick the number up.
"""
