"""Suite-wide settings.

DeepSpeed JIT-builds its CPU ops (CPU Adam, shm comm) into torch's extensions cache, which
torch finds under ~/.cache: a test that points HOME at a scratch folder (the README examples,
the MFU test) would rebuild both ops there (~30-80 s each on 2 busy cores). scripts/setup.sh
builds them once into the real cache; pin that cache for the whole session (subprocesses
inherit it) so that a scratch HOME changes nothing else. A test that wants its own cache
(tests/tuner/test_build_locks.py) still sets TORCH_EXTENSIONS_DIR itself.

Under pytest-xdist (`.ci/run` runs `-n 2 --maxschedchunk 1`: one shared queue, a test at a time
to whichever worker is free), each worker collects the tests with the `slow` ones (multi-process
runs, tens of seconds each) first: the long tests start early and the thousands of quick
single-process ones fill both workers at the end (longest first: the makespan of a list
schedule, Graham 1969). A worker also sees the controller's COLUMNS / LINES, not the 80 x 24 its
own start-up exports (the CLI's console width follows COLUMNS: plan_cli/common.py).
"""

import os

import pytest

_TERMINAL = ("COLUMNS", "LINES")


def pytest_configure(config):
    if not os.environ.get("TORCH_EXTENSIONS_DIR"):
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        os.environ["TORCH_EXTENSIONS_DIR"] = os.path.join(cache, "torch_extensions")
    given = getattr(config, "workerinput", {}).get("plan_terminal_env")
    if given is not None:  # an xdist worker: the controller's terminal settings, as a serial run has them
        for name in _TERMINAL:
            if given.get(name) is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = given[name]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist (controller): hand each worker this process's COLUMNS / LINES (None: unset)."""
    node.workerinput["plan_terminal_env"] = {name: os.environ.get(name) for name in _TERMINAL}


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike (same collection)
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: file order kept
