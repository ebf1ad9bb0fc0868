import pytest

from hcclsim.network.topology import build_flat


@pytest.fixture
def switch8():
    """The issue's reference fabric: 8 ranks on one switch, 50 GB/s, 500 ns per hop."""
    return build_flat("switch8", "switch", 8, 50e9, 500e-9)
