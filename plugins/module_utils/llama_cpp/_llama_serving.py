# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A running llama-server serves: its ``/health`` answers 200 (503 while the model loads), and, when asked, a greedy
completion through it generates tokens and reports its timings - in one module run.

A module run waits for ``/health`` for a bounded time only and then says whether it serves; a task repeats it
(``until``) to wait for a long load with progress between the runs. The completion is asked once ``/health`` answers
200, never before (llama-server refuses it while loading).
"""

from __future__ import annotations

import json
import time
import urllib.error

from ansible.module_utils.urls import open_url

from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._coordinator_state import health_status

ARGUMENT_SPEC = {
    "url": {"type": "str", "required": True},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "wait": {"type": "int", "default": 30},
    "interval": {"type": "float", "default": 5.0},
    "prompt": {"type": "str"},
    "n_predict": {"type": "int", "default": 16},
    "completion_timeout": {"type": "int", "default": 300},
}
#: Seconds one look at /health may take.
HEALTH_TIMEOUT = 10


def wait_healthy(url, api_key, wait, interval, *, health=health_status, clock=time.monotonic, sleep=time.sleep):
    """Look at ``/health`` until it answers 200 or ``wait`` seconds have passed; the last status (0: no answer)."""
    deadline = clock() + wait
    while True:
        status = health(url, api_key, timeout=HEALTH_TIMEOUT)
        remaining = deadline - clock()
        if status == 200 or remaining <= 0:
            return status
        sleep(min(interval, remaining))


def complete(url, api_key, prompt, n_predict, timeout):
    """llama-server's answer (a dict) to a greedy completion of ``prompt``, ``n_predict`` tokens, without its prompt
    cache; raises ``urllib.error.HTTPError`` on an HTTP error, OSError or ValueError when nothing or no JSON answers."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "cache_prompt": False}
    with open_url(
        url.rstrip("/") + "/completion",
        data=json.dumps(body).encode(),
        headers=headers,
        method="POST",
        timeout=timeout,
        use_proxy=False,
    ) as reply:
        return json.loads(reply.read().decode("utf-8"))


def generated(answer):
    """Whether ``answer`` generated tokens and reports its timings (what the smoke test requires)."""
    try:
        tokens = int(answer.get("tokens_predicted", 0))
    except (TypeError, ValueError):
        return False
    return tokens > 0 and isinstance(answer.get("timings"), dict)


def summary(prompt, answer):
    """The smoke result the role publishes: the prompt, the text and both speeds (tokens/s, two decimals)."""
    timings = answer["timings"]
    return {
        "prompt": prompt,
        "content": answer.get("content", ""),
        "prompt_tokens": timings.get("prompt_n"),
        "prompt_tokens_per_second": round(float(timings.get("prompt_per_second") or 0), 2),
        "generated_tokens": timings.get("predicted_n"),
        "generation_tokens_per_second": round(float(timings.get("predicted_per_second") or 0), 2),
    }


def smoke(module, params):
    """The completion and its summary; the module fails when it fails or generates nothing."""
    url = params["url"]
    try:
        answer = complete(url, params["api_key"], params["prompt"], params["n_predict"], params["completion_timeout"])
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", "replace")[:2000] if exc.fp else ""
        module.fail_json(msg=f"the completion at {url}/completion answered HTTP {exc.code}: {body}", status=exc.code)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"the completion at {url}/completion failed: {exc}")
    if not isinstance(answer, dict) or not generated(answer):
        module.fail_json(msg=f"llama-server answered without generating: {answer}", completion=answer)
    return {"completion": answer, "smoke": summary(params["prompt"], answer)}


def run_module(module):
    """Wait for /health (``wait`` seconds at most), then the completion when a prompt is given; the module's result."""
    params = module.params
    status = wait_healthy(params["url"], params["api_key"], params["wait"], params["interval"])
    result = {"changed": False, "health_status": status, "serving": status == 200}
    if status != 200:
        result["msg"] = f"llama-server at {params['url']} does not serve yet (/health answered {status or 'nothing'})"
        return result
    if params["prompt"] is not None:
        result.update(smoke(module, params))
    return result
