"""planner/out_path.py: where a command will write, checked before the work, one error naming the option."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.errors import PlanError
from planner.out_path import check_out_file


def test_a_writable_new_file_passes_and_leaves_nothing(tmp_path):
    target = tmp_path / "sub" / "out.png"
    check_out_file(target, "plot")
    assert not target.exists() and not target.parent.exists()
    plain = tmp_path / "out.png"
    check_out_file(plain, "plot")
    assert not plain.exists()


def test_an_existing_file_is_kept(tmp_path):
    f = tmp_path / "keep.png"
    f.write_bytes(b"x")
    check_out_file(f, "plot")
    assert f.read_bytes() == b"x"


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs /proc")
def test_a_folder_that_takes_no_new_file_is_refused_naming_the_option():
    """/proc exists and, as root, os.access says it is writable; creating a file there fails: said now, not after
    the search ('file not found' with no option)."""
    with pytest.raises(PlanError, match=r"^plot: cannot write /proc/x\.png"):
        check_out_file("/proc/x.png", "plot")


def test_a_folder_is_refused(tmp_path):
    with pytest.raises(PlanError, match="is a folder"):
        check_out_file(tmp_path, "out")
