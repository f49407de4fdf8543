"""A throwaway PostgreSQL cluster for the tuner's tests (initdb + pg_ctl in a temporary dir).

The server refuses to run as root, so as root it runs as the `postgres` user (runuser). It
listens on 127.0.0.1 only, on a free port, and is stopped and deleted afterwards.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pg_bindir() -> Path | None:
    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(cand) / "initdb").exists():
            return Path(cand)
    exe = shutil.which("initdb")
    return Path(exe).resolve().parent if exe else None


def ensure_postgres() -> tuple[Path | None, str]:
    """The server's bin dir, installing Debian's package via .ci/install-postgres.sh if needed."""
    bindir = pg_bindir()
    if bindir:
        return bindir, ""
    script = REPO / ".ci" / "install-postgres.sh"
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    bindir = pg_bindir()
    return bindir, "" if bindir else f"PostgreSQL could not be installed: {(r.stderr or r.stdout).strip()[-300:]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


@contextmanager
def throwaway_cluster(bindir: Path, dbname: str = "plan"):
    """Yield a SQLAlchemy URL of a fresh database on a fresh cluster; stop and delete it after."""
    root = Path(tempfile.mkdtemp(prefix="plan-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
    os.chmod(root, 0o700)
    port = _free_port()
    run = lambda cmd: subprocess.run(_as_server_user(cmd), check=True, capture_output=True, text=True)  # noqa: E731
    started = False
    try:
        run([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
        run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60",
             "-o", f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off -c max_connections=100", "start"])
        started = True
        run([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", dbname])
        yield f"postgresql://postgres@127.0.0.1:{port}/{dbname}"  # as users write it (psycopg 3)
    finally:
        if started:
            subprocess.run(_as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
                           capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
