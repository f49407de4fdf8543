"""`--model org/name`: a Hugging Face hub id resolved through huggingface_hub's own cache and
offline mode, against a cache laid out in a temporary HF_HOME (no network: HF_HUB_OFFLINE, or an
endpoint on a closed local port). huggingface_hub reads its environment at import, so each case
runs the real `plan` CLI in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed (pip install 'plan[hub]')")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"
COMMIT = "8cca527612d856d7d32bd94f8103728d614eb852"


def _cache(hf_home: Path, repo: str, fixture: str) -> Path:
    """huggingface_hub's cache layout: hub/models--org--name/{refs/main, blobs/, snapshots/<commit>/}."""
    folder = hf_home / "hub" / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(COMMIT)
    blob = folder / "blobs" / "0123456789abcdef0123456789abcdef01234567"
    blob.parent.mkdir()
    shutil.copy(FIXTURES / fixture, blob)
    snap = folder / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (snap / "config.json").symlink_to(os.path.relpath(blob, snap))
    return folder


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: connections are refused


def _plan(hf_home: Path, *args: str, offline: bool = True, endpoint: str | None = None,
          **env_extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_HOME": str(hf_home), "HF_HUB_DISABLE_TELEMETRY": "1", "COLUMNS": "200",
            "HF_ENDPOINT": endpoint or f"http://127.0.0.1:{_closed_port()}", **env_extra}
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-c", PLAN, *args], env=env, capture_output=True, text=True, timeout=120)


PLAN = "import sys, runpy; sys.argv[0] = 'plan'; runpy.run_module('plan_cli.main', run_name='__main__', alter_sys=True)"


class _SilentHub:
    """A TCP endpoint that accepts connections, counts them and never answers (a hub that hangs)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self):
        for conn in self.accepted:
            conn.close()
        self.sock.close()


def test_hub_id_from_the_cache_offline(tmp_path):
    _cache(tmp_path, "meta-llama/Llama-2-7b-hf", "llama-2-7b.json")
    r = _plan(tmp_path, "estimate", "--model", "meta-llama/Llama-2-7b-hf", "--gpus", "8", "--json", "--top", "1")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["model"]["name"] == "meta-llama/Llama-2-7b-hf"
    assert report["model"]["source"] == "hf://meta-llama/Llama-2-7b-hf"
    assert report["model"]["n_layers"] == 32 and report["results"][0]["fits"]


def test_hub_id_from_the_cache_when_the_hub_cannot_be_reached(tmp_path):
    """Online mode, endpoint refusing connections: huggingface_hub falls back to its cache."""
    _cache(tmp_path, "Qwen/Qwen2.5-7B", "qwen2.5-7b.json")
    r = _plan(tmp_path, "catalog", "show", "Qwen/Qwen2.5-7B", offline=False)
    assert r.returncode == 0, r.stderr
    assert "7615616512" in r.stdout and "hf://Qwen/Qwen2.5-7B" in r.stdout, r.stdout


@pytest.mark.parametrize("offline", [True, False])
def test_uncached_hub_id_is_one_clear_line(tmp_path, offline):
    r = _plan(tmp_path, "estimate", "--model", "google/gemma-2-9b", "--gpus", "8", offline=offline)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert "google/gemma-2-9b: config.json is not in the Hugging Face cache" in lines[0]
    assert ("HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached") in lines[0]
    assert "for --model give the path of a config.json, or a preset id from `plan catalog list" in lines[0]
    assert "Traceback" not in r.stderr


def test_refused_hub_fails_fast_without_retries(tmp_path):
    """huggingface_hub retries an uncached file 5 times with backoff (23 s of sleeps) on a refused
    connection; the planner tries once. The bound is generous: the 5 retries alone sleep 23 s."""
    start = time.monotonic()
    r = _plan(tmp_path, "estimate", "--model", "Qwen/Qwen2.5-7B", "--gpus", "16", offline=False)
    elapsed = time.monotonic() - start
    assert r.returncode == 2 and "the hub cannot be reached" in r.stderr and "one try" in r.stderr, r.stderr
    assert elapsed < 15, elapsed


def test_silent_hub_is_asked_once_with_the_timeout(tmp_path):
    """A hub that accepts and never answers: one connection, the HF_HUB_ETAG_TIMEOUT wait, one line
    (huggingface_hub alone would retry with a 60 s timeout, 5 times)."""
    hub = _SilentHub()
    try:
        r = _plan(tmp_path, "estimate", "--model", "Qwen/Qwen2.5-7B", "--gpus", "16", offline=False,
                  endpoint=hub.url, HF_HUB_ETAG_TIMEOUT="1")
    finally:
        hub.close()
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "the hub cannot be reached" in lines[0] and "one try of 1 s" in lines[0], lines[0]
    assert len(hub.accepted) == 1, len(hub.accepted)


def test_local_paths_and_presets_are_not_hub_ids(tmp_path):
    from planner.hub import is_hub_id

    folder = tmp_path / "org" / "model"
    folder.mkdir(parents=True)
    assert is_hub_id("meta-llama/Llama-2-7b-hf") and is_hub_id("Qwen/Qwen2.5-7B@main")
    assert not is_hub_id(str(folder)) and not is_hub_id("llama2-7b") and not is_hub_id("a/b.json")
    assert not is_hub_id("../etc") and not is_hub_id("/etc/passwd")
