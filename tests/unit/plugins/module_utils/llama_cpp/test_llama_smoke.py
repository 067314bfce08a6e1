"""The build smoke test against stand-in servers: one that answers, one that dies of SIGILL at its first
completion (what an AMX kernel on an unconfigured tile did), one that never gets ready, one that answers nothing."""

from __future__ import annotations

import sys
import textwrap

import pytest

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_smoke
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._coordinator_state import health_status

FAKE = textwrap.dedent(
    """\
    #!{python}
    import json, os, signal, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    MODE = {mode!r}
    port = int(sys.argv[sys.argv.index("--port") + 1])
    assert sys.argv[sys.argv.index("--host") + 1] == "127.0.0.1"
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass
        def do_GET(self):
            self.send_response(503 if MODE == "never_ready" else 200)
            self.end_headers()
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if MODE == "sigill":
                print("ggml: about to multiply", flush=True)
                os.kill(os.getpid(), signal.SIGILL)
            tokens = 0 if MODE == "empty" else body["n_predict"]
            payload = json.dumps({{"content": " Paris" * tokens, "tokens_predicted": tokens,
                                  "timings": {{"predicted_per_second": 12.5}}}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)


def fake_server(tmp_path, mode):
    path = tmp_path / f"llama-server-{mode}"
    path.write_text(FAKE.format(python=sys.executable, mode=mode))
    path.chmod(0o755)
    return str(path)


def test_a_server_that_answers_passes_and_is_stopped(tmp_path):
    result = _llama_smoke.smoke(fake_server(tmp_path, "ok"), "/m.gguf", timeout=120, n_predict=3)
    assert result["ok"], result
    assert result["content"] == " Paris" * 3 and result["tokens_predicted"] == 3
    assert result["predicted_per_second"] == 12.5
    # Stopped afterwards: nothing listens on its port any more.
    assert health_status(f"http://127.0.0.1:{result['port']}", timeout=2) == 0


def test_a_server_killed_by_sigill_fails_with_the_signal_named(tmp_path):
    result = _llama_smoke.smoke(fake_server(tmp_path, "sigill"), "/m.gguf", timeout=120)
    assert not result["ok"]
    assert "SIGILL" in result["error"] and "instruction" in result["error"]
    assert "about to multiply" in result["log_tail"]


def test_a_server_never_ready_fails_within_the_timeout(tmp_path):
    result = _llama_smoke.smoke(fake_server(tmp_path, "never_ready"), "/m.gguf", timeout=3)
    assert not result["ok"] and "not ready in time" in result["error"]


def test_an_answer_without_tokens_fails(tmp_path):
    result = _llama_smoke.smoke(fake_server(tmp_path, "empty"), "/m.gguf", timeout=120)
    assert not result["ok"] and "no tokens" in result["error"]


@pytest.mark.parametrize(
    ("code", "words"), [(-4, "killed by SIGILL"), (-9, "killed by SIGKILL"), (1, "exited with status 1")]
)
def test_exit_descriptions(code, words):
    assert words in _llama_smoke.describe_exit(code)
