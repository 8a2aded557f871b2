import pytest

import torchtpu  # noqa: F401  (registers the tpu device)


@pytest.fixture
def metrics():
    """torchtpu.metrics() counted from the start of the test."""
    torchtpu.reset_metrics()
    return torchtpu.metrics
