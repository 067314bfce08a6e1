"""Load a model with llama-server on loopback, ask for a short greedy completion, print it as JSON, stop the server.

Run on a lab host (python3 -, the script on stdin) and on the controller, by tests/test_2_llama.py:
    python3 - BIN_DIR MODEL LOAD_MODE
"""

import json
import socket
import subprocess
import sys
import time
import urllib.request


def main():
    bin_dir, model, load_mode = sys.argv[1:4]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    command = [f"{bin_dir}/llama-server", "-m", model, "-c", "256", "-t", "1", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--load-mode", load_mode]
    started = time.monotonic()
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # noqa: S603
    try:
        while True:
            if server.poll() is not None:
                print(json.dumps({"error": f"exit {server.returncode}", "log": server.stdout.read().decode()[-3000:]}))
                return
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:  # noqa: S310
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - started > 120:
                print(json.dumps({"error": "not healthy in 120 s"}))
                return
            time.sleep(0.2)
        loaded = time.monotonic() - started
        body = json.dumps(
            {"prompt": "hello world, the cluster", "n_predict": 8, "temperature": 0, "cache_prompt": False}
        ).encode()
        request = urllib.request.Request(  # noqa: S310
            f"http://127.0.0.1:{port}/completion", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
            answer = json.loads(response.read())
        print(json.dumps({"content": answer["content"], "tokens": answer["tokens_predicted"], "load_s": loaded}))
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
