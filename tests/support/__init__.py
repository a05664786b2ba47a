"""Helpers that start real services for tests (import as ``from support.X import ...``)."""
