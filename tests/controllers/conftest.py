import pytest

from controllers.harness import Harness


@pytest.fixture
def h() -> Harness:
    """A fresh harness: SimClock, MemoryAPI, Manager, SimulatedCloud(Provider), operator.build(), started."""
    return Harness()
