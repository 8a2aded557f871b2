import os
import tempfile

import pytest
import torch

# The suite's compiled programs go to a cache directory of its own, not the user's (child processes inherit it).
os.environ.setdefault("TORCHTPU_CACHE_DIR", tempfile.mkdtemp(prefix="torchtpu-test-cache-"))

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


@pytest.fixture
def survivor():
    """A tpu tensor made before a failure; ``helpers.assert_usable`` checks it afterwards."""
    cpu = torch.arange(6.0).view(2, 3)
    return cpu.to("tpu"), cpu
