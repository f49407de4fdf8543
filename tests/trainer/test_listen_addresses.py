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


@pytest.mark.parametrize("host, addresses, refused", [
    ("node0", ["127.0.1.1"], True),  # Debian/Ubuntu /etc/hosts: "127.0.1.1 node0"
    ("node0", ["::1", "127.0.0.1"], True),
    ("node0", ["10.0.0.5"], False),
    ("node0", ["127.0.1.1", "10.0.0.5"], False),
    ("127.0.0.1", ["127.0.0.1"], False),  # one machine, said so
    ("[::1]", ["::1"], False),
    ("localhost", ["127.0.0.1"], False),
    ("node0", [], False),
])
def test_a_rendezvous_name_that_is_loopback_only_here(host, addresses, refused):
    from trainer.bind import loopback_only

    assert loopback_only(host, addresses) is refused


def test_node_0_refuses_a_rendezvous_name_the_other_nodes_cannot_reach(monkeypatch):
    """`plan train --nnodes 2 --node-rank 0 --rdzv-endpoint node0:29500` where /etc/hosts maps node0 to 127.0.1.1:
    node 0's store listened on loopback only and node 1 waited for it until the rendezvous timed out."""
    import socket

    from planner.errors import PlanError
    from trainer.bind import check_store_host

    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: (
        [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.1.1", 0))] if host == "node0" else real(host, *a, **k)))
    with pytest.raises(PlanError) as e:
        check_store_host("node0", 2, 0)
    assert e.value.field == "rdzv_endpoint" and "node0 resolves to 127.0.1.1 on this node" in str(e.value)
    check_store_host("node0", 2, 1)  # node 1 connects; where node0 points there is its own affair
    check_store_host("node0", 1, 0)  # one node: loopback is what bound_stores wants
    check_store_host("127.0.0.1", 2, 0)
