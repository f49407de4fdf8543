"""torch's TCP stores listen on one address, never on every interface.

torch's elastic rendezvous (c10d backend) and the store it shares with the workers are
`TCPStore` servers that bind to all interfaces (`*:PORT`, no authentication) whatever host
they are given. While `bound_stores()` is active, a server store created in this process
listens on the address its own host name resolves to instead: 127.0.0.1 for a single-node
run, the node's address on the interface that reaches the rendezvous endpoint for a
multi-node one (`local_addr`). torch accepts a ready listening socket (`master_listen_fd`).
Single-node runs also keep gloo and NCCL's own sockets on the loopback interface.
"""

from __future__ import annotations

import errno
import os
import socket
from contextlib import contextmanager

_TCPSTORE_ARGS = ("host_name", "port", "world_size", "is_master", "timeout", "wait_for_workers",
                  "multi_tenant", "master_listen_fd", "use_libuv")


def local_addr(endpoint_host: str, nnodes: int) -> str | None:
    """This node's address for the run: loopback alone, else the one that reaches the endpoint
    (None when the endpoint does not resolve here: torch then uses this host's name)."""
    if nnodes == 1:
        return "127.0.0.1"
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(endpoint_host, 1, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:  # no packet is sent: routing only
            s.connect(sockaddr)
            return s.getsockname()[0]
    except OSError:
        return None


def loopback_only(host: str, addresses: list[str]) -> bool:
    """A host NAME whose every address here is a loopback one (Debian/Ubuntu's /etc/hosts line "127.0.1.1 node0"): a
    store listening there (bound_stores) is out of the other nodes' reach, while they resolve the name to the node's
    network address and wait for it until the rendezvous times out. A literal address or "localhost" is the user's
    own choice of one machine (two agents on it: tests/trainer/test_multinode.py)."""
    import ipaddress

    name = host.strip("[]").lower()
    try:
        ipaddress.ip_address(name)
        return False
    except ValueError:
        pass
    if name in ("localhost", "localhost.localdomain") or not addresses:
        return False
    return all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def check_store_host(host: str, nnodes: int, node_rank: int) -> None:
    """Node 0 of several: the rendezvous host must name an address the other nodes reach (loopback_only)."""
    from planner.errors import PlanError

    if nnodes == 1 or node_rank != 0:
        return
    try:
        addresses = sorted({info[4][0] for info in socket.getaddrinfo(host.strip("[]"), None)})
    except (socket.gaierror, UnicodeError):
        return  # trainer/ranks.check_endpoint says so
    if loopback_only(host, addresses):
        raise PlanError("rdzv_endpoint", f"{host} resolves to {', '.join(addresses)} on this node (node 0; /etc/hosts): "
                        "the other nodes cannot reach a rendezvous listening there; give node 0's network address "
                        "(its IP, or a name that resolves to it), or 127.0.0.1 for nodes on this one machine")


def loopback_comm_env(nnodes: int) -> None:
    """Single node: gloo and NCCL bootstrap sockets on the loopback interface (unless set)."""
    if nnodes == 1:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")


class PortInUse(OSError):
    """The store's port is held by another socket. Not a RuntimeError on purpose: torch's c10d
    rendezvous would then retry as a client of whatever holds the port (a foreign store, or a
    listener that never answers: a 60 s read timeout), instead of saying what happened."""

    def __init__(self, host: str, port: int, reason: str):
        super().__init__(errno.EADDRINUSE, f"cannot listen on {host}:{port}: {reason}")
        self.host, self.port = host, port


def _listen_fd(host: str, port: int) -> int:
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.create_server(sockaddr[:2], family=family, backlog=2048)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise PortInUse(host, port, e.strerror or str(e)) from None
        raise RuntimeError(f"cannot listen on {host}:{port}: {e}") from None  # torch retries as a client
    return sock.detach()  # the store owns the socket now


@contextmanager
def bound_stores():
    """Within: server TCPStores of this process listen on their host name's address only."""
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend as c10d

    original = dist.TCPStore

    class BoundTCPStore(original):  # still a TCPStore for torch's isinstance checks
        def __init__(self, *args, **kwargs):
            kwargs.update(zip(_TCPSTORE_ARGS, args))
            if kwargs.get("is_master") and kwargs.get("master_listen_fd") is None:
                kwargs["master_listen_fd"] = _listen_fd(kwargs["host_name"], kwargs["port"])
            super().__init__(**kwargs)

    dist.TCPStore = c10d.TCPStore = BoundTCPStore
    try:
        yield
    finally:
        dist.TCPStore = c10d.TCPStore = original
