"""llama_server_serving: /health looked at until it answers 200 or the run's wait is over (not serving is no failure,
so that a task's until can wait longer); once serving, the greedy completion with the API key, checked for tokens and
timings, summed up as the role's smoke result. A loopback HTTP server stands in for llama-server."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_serving
from ansible_collections.llamarpc.cluster.plugins.modules import llama_server_serving

ANSWER = {
    "content": " Paris.",
    "tokens_predicted": 3,
    "timings": {"prompt_n": 6, "prompt_per_second": 41.236, "predicted_n": 3, "predicted_per_second": 12.499},
}


class FakeServer(http.server.ThreadingHTTPServer):
    """``health``: statuses /health answers in turn (the last one repeats); ``completion``: (status, JSON body)."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.health = [200]
        self.completion = (200, ANSWER)
        self.requests = []

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        del args

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 - http.server's name
        server = self.server
        server.requests.append(("GET", self.path, dict(self.headers), None))
        status = server.health.pop(0) if len(server.health) > 1 else server.health[0]
        self.reply(status, {"status": "ok" if status == 200 else "loading model"})

    def do_POST(self):  # noqa: N802 - http.server's name
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server.requests.append(("POST", self.path, dict(self.headers), body))
        self.reply(*server.completion)


@pytest.fixture
def server():
    fake = FakeServer()
    thread = threading.Thread(target=fake.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.shutdown()
    fake.server_close()


def test_serving_without_a_prompt_asks_no_completion(run_module, server):
    result = run_module(llama_server_serving, {"url": server.url, "wait": 0})
    assert not result.failed and result.result == {"changed": False, "health_status": 200, "serving": True}
    assert [request[:2] for request in server.requests] == [("GET", "/health")]


def test_a_loading_server_is_waited_for_within_the_runs_wait(run_module, server):
    server.health = [503, 503, 200]
    result = run_module(llama_server_serving, {"url": server.url, "wait": 30, "interval": 0.01})
    assert result.result["serving"] and len(server.requests) == 3


def test_not_serving_by_the_end_of_the_wait_is_no_failure_and_asks_no_completion(run_module, server):
    server.health = [503]
    result = run_module(llama_server_serving, {"url": server.url, "wait": 0, "prompt": "Hi"})
    assert not result.failed and not result.result["serving"] and result.result["health_status"] == 503
    assert result.result["msg"] == f"llama-server at {server.url} does not serve yet (/health answered 503)"
    assert [request[0] for request in server.requests] == ["GET"]


def test_nothing_answering_is_status_0(run_module, closed_port):
    result = run_module(llama_server_serving, {"url": f"http://127.0.0.1:{closed_port}", "wait": 0})
    assert not result.failed and result.result["health_status"] == 0 and not result.result["serving"]
    assert result.result["msg"].endswith("(/health answered nothing)")


def test_the_completion_is_greedy_with_the_key_and_summed_up(run_module, server):
    args = {"url": server.url, "wait": 0, "prompt": "The capital of France is", "n_predict": 1, "api_key": "k3y"}
    result = run_module(llama_server_serving, args)
    assert not result.failed
    _method, path, headers, body = server.requests[-1]
    assert path == "/completion"
    assert body == {"prompt": "The capital of France is", "n_predict": 1, "temperature": 0, "cache_prompt": False}
    assert headers["Authorization"] == "Bearer k3y"
    assert all(request[2].get("Authorization") == "Bearer k3y" for request in server.requests)
    assert result.result["smoke"] == {
        "prompt": "The capital of France is",
        "content": " Paris.",
        "prompt_tokens": 6,
        "prompt_tokens_per_second": 41.24,
        "generated_tokens": 3,
        "generation_tokens_per_second": 12.5,
    }


def test_no_key_sends_no_authorization(run_module, server):
    run_module(llama_server_serving, {"url": server.url, "wait": 0, "prompt": "Hi"})
    assert all("Authorization" not in request[2] for request in server.requests)


@pytest.mark.parametrize(
    "answer",
    [{**ANSWER, "tokens_predicted": 0}, {key: value for key, value in ANSWER.items() if key != "timings"}],
    ids=["no tokens", "no timings"],
)
def test_an_answer_without_tokens_or_timings_fails(run_module, server, answer):
    server.completion = (200, answer)
    result = run_module(llama_server_serving, {"url": server.url, "wait": 0, "prompt": "Hi"})
    assert result.failed and result.result["msg"].startswith("llama-server answered without generating: {")


def test_an_http_error_of_the_completion_fails_with_its_status(run_module, server):
    server.completion = (401, {"error": {"message": "Invalid API Key"}})
    result = run_module(llama_server_serving, {"url": server.url, "wait": 0, "prompt": "Hi", "api_key": "old"})
    assert result.failed and result.result["status"] == 401
    assert result.result["msg"].startswith(f"the completion at {server.url}/completion answered HTTP 401: ")
    assert "Invalid API Key" in result.result["msg"]


def test_the_wait_ends_at_its_deadline():
    now = [0.0]
    looks = []

    def health(url, api_key, timeout):
        del url, api_key, timeout
        looks.append(now[0])
        return 503

    def sleep(seconds):
        now[0] += seconds

    status = _llama_serving.wait_healthy("u", "", 12, 5, health=health, clock=lambda: now[0], sleep=sleep)
    assert status == 503 and looks == [0.0, 5.0, 10.0, 12.0]
