"""Fuzz the running API from its own OpenAPI spec with schemathesis: no 5xx anywhere.

Bounded: a few examples per operation, one seed, 127.0.0.1 only. POST /tune is fuzzed without
a token (so nothing is started): every case must be answered, never with a server error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import httpx
import pytest
from service_server import running_server


@pytest.mark.slow
def test_no_server_error_from_the_openapi_spec(tmp_path):
    st = shutil.which("schemathesis", path=os.path.dirname(sys.executable)) or shutil.which("schemathesis")
    if st is None:
        pytest.skip("schemathesis is not installed (pip install schemathesis)")
    with running_server(tmp_path, token="fuzz-token") as base:
        proc = subprocess.run(
            [st, "run", f"{base}/openapi.json", "--checks", "not_a_server_error", "--max-examples", "15",
             "--seed", "7", "--request-timeout", "60", "--suppress-health-check", "all"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
            env=os.environ | {"SCHEMATHESIS_HOOKS": ""})
        tail = proc.stdout[-4000:] + proc.stderr[-2000:]
        assert proc.returncode == 0, tail
        assert "generated" in proc.stdout and "failed" not in proc.stdout.split("Test cases:")[-1].split("\n")[1], tail
        assert httpx.get(base + "/catalog").status_code == 200  # still up afterwards
