"""Materialize the ``repository/`` templates into a concrete Triton model repository for this device.

The Python models' logic lives in :mod:`appliance.detector.repository.stages` (imported inside the Triton stub, with
``triton_python_backend_utils`` handed in); :mod:`appliance.detector.repository.materialize` writes the directory.
"""
