"""`plan serve` on a port another server holds, or a host with no address here: one line naming the option,
exit 2, before the app starts (uvicorn logged 'ERROR: [Errno 98] ...' after 'Application startup complete'
and exited 3, the code of 'no plan fits'). --port 0 says which port the OS picked."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]


def serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(REPO), "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "plan_cli.main", "serve", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_a_port_in_use_is_one_line_and_exit_2():
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    try:
        r = serve("--host", "127.0.0.1", "--port", str(port))
    finally:
        held.close()
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (f"error: port: 127.0.0.1:{port}: address already in use (another "
                                                "server holds it? pick another --port)")
    assert "Application startup" not in r.stderr


def test_a_host_with_no_address_is_one_line_and_exit_2():
    r = serve("--host", "no-such-host.invalid", "--port", "0")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(
        "error: host: no-such-host.invalid: no address found for it on this machine"), r.stderr


def test_port_0_says_the_port_it_got(tmp_path):
    env = os.environ | {"PYTHONPATH": str(REPO), "COLUMNS": "300"}
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "plan_cli.main", "serve", "--port", "0"], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        line = ""
        while time.monotonic() < deadline and not line:
            line = next((ln for ln in log.read_text().splitlines() if ln.startswith("serving on http://127.0.0.1:")), "")
            time.sleep(0.2)
        assert line, log.read_text()
        port = int(line.split("127.0.0.1:", 1)[1].split("/", 1)[0])
        assert port > 0
        with socket.create_connection(("127.0.0.1", port), timeout=30):
            pass  # the server listens where the line says
    finally:
        proc.terminate()
        proc.wait(timeout=30)
