"""Load test of the HTTP service: N concurrent POST /estimate on loopback, all must be answered.

Starts a real `plan serve` (uvicorn) on 127.0.0.1 and a free port, sends `--requests` POST
/estimate bodies with `--in-flight` of them outstanding at once (default: all 200 at once),
and prints the latency percentiles (p50, p90, p99, max), the status codes and the throughput.
Exit code 1 if any request got no answer or a 5xx.

    python benchmarks/service_load.py [--requests 200] [--in-flight 200] [--body '{"model": "7b", "gpus": 48}']
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BODY = {"model": "7b", "gpus": 48}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(extra: list[str]):
    port = _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="plan-load-"))
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("PLAN_API_TOKEN", None)
    log = open(tmp / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "plan_cli.main", "serve", "--host", "127.0.0.1",
                             "--port", str(port), "--storage", f"sqlite:///{tmp / 'tune.db'}",
                             "--workdir", str(tmp / "work"), *extra],
                            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(base + "/openapi.json", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("server did not start:\n" + (tmp / "server.log").read_text()[-2000:])
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


async def _load(base: str, body: dict, n: int, in_flight: int, timeout_s: float) -> tuple[list[float], Counter, float]:
    gate = asyncio.Semaphore(in_flight)
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    latencies: list[float] = []
    outcomes: Counter = Counter()
    async with httpx.AsyncClient(base_url=base, timeout=timeout_s, limits=limits) as client:
        await client.post("/estimate", json=body)  # warm-up (imports, catalog cache)

        async def one() -> None:
            async with gate:
                t0 = time.perf_counter()
                try:
                    r = await client.post("/estimate", json=body)
                    outcomes[r.status_code] += 1
                except httpx.HTTPError as e:
                    outcomes[type(e).__name__] += 1
                    return
                latencies.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        wall = time.perf_counter() - t0
    return latencies, outcomes, wall


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--in-flight", type=int, default=None, help="outstanding at once (default: all)")
    ap.add_argument("--body", type=json.loads, default=DEFAULT_BODY, help="the POST /estimate JSON body")
    ap.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = ap.parse_args(argv)
    in_flight = args.in_flight or args.requests
    with served([]) as base:
        latencies, outcomes, wall = asyncio.run(_load(base, args.body, args.requests, in_flight, args.timeout))
    answered = sum(c for k, c in outcomes.items() if isinstance(k, int))
    result = {
        "requests": args.requests, "in_flight": in_flight, "answered": answered,
        "status": {str(k): v for k, v in sorted(outcomes.items(), key=str)},
        "p50_s": statistics.median(latencies) if latencies else None,
        "p90_s": percentile(latencies, 0.90) if latencies else None,
        "p99_s": percentile(latencies, 0.99) if latencies else None,
        "max_s": max(latencies) if latencies else None,
        "wall_s": wall, "requests_per_s": answered / wall if wall else None, "cpus": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{answered}/{args.requests} answered ({result['status']}), {in_flight} in flight, "
              f"{result['cpus']} CPUs, body {json.dumps(args.body)}")
        if latencies:
            print(f"latency p50 {result['p50_s']:.3f} s  p90 {result['p90_s']:.3f} s  p99 {result['p99_s']:.3f} s  "
                  f"max {result['max_s']:.3f} s;  {result['requests_per_s']:.1f} requests/s over {wall:.1f} s")
    bad = answered < args.requests or any(isinstance(k, int) and k >= 500 for k in outcomes)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
