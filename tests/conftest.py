"""Suite-wide settings.

DeepSpeed JIT-builds its CPU ops (CPU Adam, shm comm) into torch's extensions cache, which
torch finds under ~/.cache: a test that points HOME at a scratch folder (the README examples,
the MFU test) would rebuild both ops there (~30-80 s each on 2 busy cores). scripts/setup.sh
builds them once into the real cache; pin that cache for the whole session (subprocesses
inherit it) so that a scratch HOME changes nothing else. A test that wants its own cache
(tests/tuner/test_build_locks.py) still sets TORCH_EXTENSIONS_DIR itself.
"""

import os


def pytest_configure(config):
    if not os.environ.get("TORCH_EXTENSIONS_DIR"):
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        os.environ["TORCH_EXTENSIONS_DIR"] = os.path.join(cache, "torch_extensions")
