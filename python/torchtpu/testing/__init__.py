"""Conformance tooling for the tpu device.

``python -m torchtpu.testing.opinfo`` runs PyTorch's OpInfo database on ``tpu`` against CPU and writes a
report (see :mod:`torchtpu.testing.opinfo`); :mod:`torchtpu.testing.report` renders the results.
"""
