"""Triton Python-backend model implementations. Each takes the ``pb_utils`` module as an argument, so this
package imports nothing from Triton and stays importable (and testable) outside the stub."""
