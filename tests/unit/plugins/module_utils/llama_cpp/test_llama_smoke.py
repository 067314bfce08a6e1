"""The build smoke test against stand-in servers: one that answers, one that dies of SIGILL at its first
completion (what an AMX kernel on an unconfigured tile did), one that never gets ready, one that answers nothing."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest
from tiny_gguf import generate

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp import _llama_smoke
from ansible_collections.llamarpc.cluster.plugins.module_utils.plan._coordinator_state import health_status
from ansible_collections.llamarpc.cluster.plugins.module_utils.tensor_cache import _tensor_hashes

FAKE = textwrap.dedent(
    """\
    #!{python}
    import json, os, signal, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    MODE = {mode!r}
    port = int(sys.argv[sys.argv.index("--port") + 1])
    print("argv:", " ".join(sys.argv[1:]), flush=True)
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


def test_a_line_the_log_lacks_fails_a_smoke_that_answered(tmp_path):
    server = fake_server(tmp_path, "ok")
    said = _llama_smoke.smoke(server, "/m.gguf", timeout=120, extra_args=("--x", "1"), expect=("argv:", "--x 1"))
    assert said["ok"], said
    lacking = _llama_smoke.smoke(server, "/m.gguf", timeout=120, expect=("42 tensor hashes from /h",))
    assert not lacking["ok"]
    assert lacking["error"] == "llama-server answered, but its log lacks '42 tensor hashes from /h'"
    assert "argv:" in lacking["log_tail"]


class HelpModule:
    """What hashes_options uses of an AnsibleModule: run_command answering ``--help`` with ``text``."""

    def __init__(self, text, rc=0):
        self.text, self.rc = text, rc

    def run_command(self, argv, environ_update=None):
        assert argv[1:] == ["--help"] and environ_update == {"LC_ALL": "C"}
        return self.rc, self.text, ""


def test_a_build_with_the_hashes_flag_is_smoked_with_every_tensor_of_the_model(tmp_path):
    model = generate(tmp_path / "model", preset="tiny", shards=2, seed=3)
    first = model["files"][0]["path"]
    help_text = "--rpc ...\n--rpc-tensor-hashes FILE  file of tensor hashes\n"
    options = _llama_smoke.hashes_options(HelpModule(help_text), "/s/llama-server", first, str(tmp_path))
    path = str(tmp_path / "tensor-hashes.txt")
    assert options["extra_args"] == ("--rpc-tensor-hashes", path, "--log-verbosity", "4")
    with open(path, encoding="utf-8") as handle:
        written = _tensor_hashes.parse(handle.read())
    # Every tensor of both shards, by its name and size, as llama-server matches them; and the line that says so.
    assert len(written["tensors"]) == model["tensor_count"]
    assert written["tensors"] == _llama_smoke.zero_hashes(first)
    assert options["expect"] == (f"{model['tensor_count']} tensor hashes from {path}",)


@pytest.mark.parametrize(("text", "rc"), [("--rpc SERVERS\n", 0), ("--rpc-tensor-hashes FILE\n", 1)])
def test_a_build_without_the_flag_is_smoked_as_before(tmp_path, text, rc):
    assert _llama_smoke.hashes_options(HelpModule(text, rc), "/s/llama-server", "/m.gguf", str(tmp_path)) == {}
    assert os.listdir(tmp_path) == []
