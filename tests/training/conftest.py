"""The training tests use tiny models: one torch thread runs them fastest (and keeps them
fast when the machine is busy, where spinning intra-op threads slow small ops ~10x)."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
