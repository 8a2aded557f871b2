import pytest
import torch

import torchtpu  # noqa: F401  (registers the tpu device)


@pytest.fixture
def metrics():
    """torchtpu.metrics() counted from the start of the test."""
    torchtpu.reset_metrics()
    return torchtpu.metrics


@pytest.fixture(autouse=True)
def seeded():
    """Every test draws the same random inputs on every run, so a tolerance is checked on fixed data."""
    torch.manual_seed(0)
