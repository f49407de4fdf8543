"""No open ports (issue 13): during a real 2-rank `plan train`, every TCP socket its process
tree listens on is on the loopback interface (torch's rendezvous store, the store shared with
the workers, gloo's pairs), read off /proc/net/tcp{,6} while the run goes on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from trainer.bind import bound_stores, local_addr

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")


def _listening() -> dict[str, tuple[str, int]]:
    """socket inode -> (hex address as /proc shows it, port) of every LISTEN TCP socket."""
    out = {}
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(f).read_text().splitlines()[1:]:
            p = line.split()
            if p[3] == "0A":
                addr, port = p[1].rsplit(":", 1)
                out[p[9]] = (addr, int(port, 16))
    return out


def _tree(root: int) -> set[int]:
    parents = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    pids, grew = {root}, True
    while grew:
        new = {p for p, pp in parents.items() if pp in pids} - pids
        pids |= new
        grew = bool(new)
    return pids


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    return inodes


def _is_loopback(hex_addr: str) -> bool:
    if len(hex_addr) == 8:  # IPv4, little-endian words: 127.x.x.x ends in 7F
        return hex_addr.endswith("7F")
    return hex_addr in ("00000000000000000000000001000000",) or (  # ::1
        hex_addr.startswith("0000000000000000FFFF0000") and hex_addr.endswith("7F"))  # ::ffff:127.x


def test_local_addr():
    assert local_addr("127.0.0.1", 1) == "127.0.0.1"
    assert local_addr("127.0.0.1", 2).startswith("127.")  # the interface that reaches the endpoint
    assert local_addr("no-such-host.invalid", 2) is None  # torch's own default then


def test_bound_store_listens_on_its_host_only():
    with bound_stores():
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, multi_tenant=False)
    assert isinstance(store, dist.TCPStore) and dist.TCPStore.__name__ == "TCPStore"  # restored
    addrs = [a for a, port in _listening().values() if port == store.port]
    assert addrs and all(_is_loopback(a) for a in addrs), addrs
    client = dist.TCPStore("127.0.0.1", store.port, is_master=False)
    client.set("k", "v")
    assert store.get("k") == b"v"


@pytest.mark.slow
def test_a_real_run_listens_on_loopback_only(tmp_path):
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    for key in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "MASTER_ADDR", "RANK", "WORLD_SIZE"):
        env.pop(key, None)
    cmd = [sys.executable, "-m", "plan_cli.main", "train", "--model", "tiny", "--nproc", "2",
           "--sharding", "none", "--steps", "6", "--json", str(tmp_path / "out.json")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen: dict[int, str] = {}
    while proc.poll() is None:
        inodes = _socket_inodes(_tree(proc.pid))
        for inode, (addr, port) in _listening().items():
            if inode in inodes:
                seen[port] = addr
        time.sleep(0.05)
    out = proc.stdout.read().decode(errors="replace")
    assert proc.returncode == 0, out[-3000:]
    assert len(seen) >= 2, (seen, out[-2000:])  # at least the rendezvous store and one gloo pair
    assert all(_is_loopback(a) for a in seen.values()), seen
