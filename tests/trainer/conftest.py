import os

import pytest

# one thread per rank: the 2 cores are shared by the ranks (notes/cpu-runs.md)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def out_json(tmp_path):
    return str(tmp_path / "result.json")
