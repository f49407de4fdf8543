"""Hugging Face hub ids (`meta-llama/Llama-2-7b-hf`) -> the model's config.json, through
`huggingface_hub` itself: its cache (HF_HOME / HF_HUB_CACHE), its offline mode (HF_HUB_OFFLINE=1),
its token (HF_TOKEN or `hf auth login`) and its endpoint (HF_ENDPOINT). Only config.json is
fetched, never weights. huggingface_hub is optional (`pip install 'plan[hub]'`): imported here only.
"""

from __future__ import annotations

import re
from pathlib import Path

from planner.errors import PlanError

# owner/name[@revision], as the hub spells repository ids (letters, digits, - _ .)
HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})(?:@(?P<rev>[\w.\-/]{1,100}))?$")


def is_hub_id(text: str) -> bool:
    """`org/name` (optionally `@revision`) that is not an existing local path or a .json file."""
    if not HUB_ID.match(text) or text.endswith(".json") or ".." in text:
        return False
    return not Path(text).expanduser().exists()


# Seconds to wait for the hub's answer (HF_HUB_ETAG_TIMEOUT overrides it, as it does in huggingface_hub).
HUB_TIMEOUT_S = 5.0
INSTEAD = "for --model give the path of a config.json, or a preset id from `plan catalog list --kind models`"


def _timeout_s(constants) -> float:
    """HF_HUB_ETAG_TIMEOUT when the user set one, else HUB_TIMEOUT_S (huggingface_hub's default is 10 s)."""
    default = getattr(constants, "DEFAULT_ETAG_TIMEOUT", 10)
    env = getattr(constants, "HF_HUB_ETAG_TIMEOUT", default)
    return float(env) if env != default else HUB_TIMEOUT_S


def _probe_once(huggingface_hub, repo: str, revision: str | None, timeout_s: float) -> None:
    """One HEAD of config.json, no retries: an uncached file on an unreachable hub is otherwise retried
    5 times with backoff (1+2+4+8+8 s) by hf_hub_download. Hub answers (404, gated, ...) raise its errors."""
    url = huggingface_hub.hf_hub_url(repo, "config.json", revision=revision)
    try:
        huggingface_hub.get_hf_file_metadata(url, timeout=timeout_s)
    except huggingface_hub.errors.HfHubHTTPError:
        raise
    except Exception as e:  # the transport's own errors (requests, httpx or httpx2 by version)
        first = str(e).strip().splitlines()[0][:120] if str(e).strip() else ""
        raise _Unreachable(f"{type(e).__name__}{': ' + first if first else ''}") from None


class _Unreachable(Exception):
    """The hub did not answer (connection refused, timed out, no route, DNS)."""


def hub_config_path(ref: str, timeout_s: float | None = None) -> Path:
    """The cached config.json of hub id `ref` (downloaded first when online and not cached)."""
    m = HUB_ID.match(ref)
    if m is None:
        raise PlanError("model", f"{ref!r} is not a hub id (owner/name, e.g. meta-llama/Llama-2-7b-hf)")
    repo, revision = m.group("repo"), m.group("rev")
    try:
        import huggingface_hub
        from huggingface_hub import constants, errors
        from huggingface_hub.utils import logging as log
    except ImportError:
        raise PlanError("model", f"{ref}: hub ids need huggingface_hub (pip install 'plan[hub]'), "
                        "or give the path of a downloaded config.json") from None
    where = f"the Hugging Face cache ({constants.HF_HUB_CACHE})"
    verbosity = log.get_verbosity()
    log.set_verbosity_error()  # its retry warnings: the outcome is said in one line below
    timeout_s = _timeout_s(constants) if timeout_s is None else timeout_s
    try:
        cached = huggingface_hub.try_to_load_from_cache(repo, "config.json", revision=revision)
        if not constants.HF_HUB_OFFLINE and not isinstance(cached, str):
            _probe_once(huggingface_hub, repo, revision, timeout_s)
        return Path(huggingface_hub.hf_hub_download(repo, "config.json", revision=revision, etag_timeout=timeout_s))
    except _Unreachable as e:
        raise PlanError("model", f"{ref}: config.json is not in {where} and the hub cannot be reached "
                        f"({constants.ENDPOINT}, one try of {timeout_s:g} s: {e}); {INSTEAD}, "
                        "or run once with network") from None
    except errors.GatedRepoError:
        raise PlanError("model", f"{ref}: gated on the hub; accept its license on huggingface.co and log in "
                        "(hf auth login or HF_TOKEN), or give the path of a downloaded config.json") from None
    except errors.RepositoryNotFoundError:
        raise PlanError("model", f"{ref}: no such model on the hub (or it is private: log in with hf auth login)") from None
    except errors.RevisionNotFoundError:
        raise PlanError("model", f"{ref}: no revision {revision!r} on the hub") from None
    except errors.LocalEntryNotFoundError:
        offline = " (HF_HUB_OFFLINE is set)" if constants.HF_HUB_OFFLINE else " and the hub cannot be reached"
        raise PlanError("model", f"{ref}: config.json is not in {where}{offline}; {INSTEAD}, "
                        "or run once with network") from None
    except errors.EntryNotFoundError:  # after its subclass LocalEntryNotFoundError
        raise PlanError("model", f"{ref}: the repository has no config.json") from None
    except (errors.HfHubHTTPError, OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PlanError("model", f"{ref}: cannot read config.json from the hub ({first[:160]})") from None
    finally:
        log.set_verbosity(verbosity)
