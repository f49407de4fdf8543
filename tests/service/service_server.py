"""Start a real `plan serve` (uvicorn) on 127.0.0.1 and a free port, for the service tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_server(tmp: Path, *, token: str | None, extra: list[str] = (), stop_timeout_s: float = 15,
                   started: list | None = None, port: int | None = None):
    """`started`: a list the server's Popen is appended to (a test that kills it itself); `port`: a server started
    again where an earlier one was (default: a free port)."""
    port = port or free_port()
    env = {k: v for k, v in os.environ.items() if k != "PLAN_API_TOKEN"} | {"OMP_NUM_THREADS": "1"}
    if token is not None:
        env["PLAN_API_TOKEN"] = token
    cmd = [sys.executable, "-m", "plan_cli.main", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--storage", f"sqlite:///{tmp / 'tune.db'}", "--workdir", str(tmp / "work"), *extra]
    log = open(tmp / f"server-{port}.log", "wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
    if started is not None:
        started.append(proc)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(base + "/openapi.json", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("server did not start:\n" + (tmp / f"server-{port}.log").read_text()[-3000:])
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def wait_status(base: str, study: str, until, deadline_s: float = 600) -> dict:
    """GET /tune/STUDY every second until `until(status)` or the deadline; the last status."""
    deadline = time.monotonic() + deadline_s
    while True:
        status = httpx.get(f"{base}/tune/{study}", timeout=30).json()
        if until(status) or time.monotonic() > deadline:
            return status
        time.sleep(1)
