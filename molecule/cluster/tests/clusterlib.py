"""What the cluster scenario's tests share: the API client, the deployed plan, waiting for the cluster to serve."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from labtest import address, lab

API_KEY = "molecule-cluster-key"  # group_vars/all.yml
PORT = 8080


def api(path, body=None, key=API_KEY, timeout=60):
    """(status, parsed JSON or text) of a request to the coordinator's API (a lab host: allowed)."""
    url = f"http://{address('node1')}:{PORT}{path}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http to a lab host
            payload = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as exc:
        payload, status = exc.read().decode(), exc.code
    except (urllib.error.URLError, OSError) as exc:
        return None, str(exc)
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload


def greedy(prompt, tokens=24):
    return {"prompt": prompt, "n_predict": tokens, "temperature": 0, "cache_prompt": False, "seed": 1}


def serving(timeout=2):
    """True when a completion comes back now."""
    status, body = api("/completion", greedy("ping", 2), timeout=timeout + 20)
    return status == 200 and isinstance(body, dict) and body.get("tokens_predicted", 0) > 0


def deployed_plan():
    return json.loads(lab("node1").file("/etc/llamarpc/coordinator/plan.json").content_string)


def wait_serving(timeout):
    """Seconds until the cluster serves a completion again (or None after ``timeout``)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if serving():
            return time.monotonic() - start
        time.sleep(1)
    return None
