# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A client that sends one greedy completion a second through a change of the cluster, and says what it saw.

Each tick starts one request (in its own thread, so that a hung request does not delay the next tick) and records
its outcome in a JSON line: ``ok`` (an answer), ``busy`` (HTTP 503; ``retry_after`` says whether the header was
there), ``refused`` (the connection was refused: nothing was accepted), ``dropped`` (the request was sent and the
connection closed or reset without a status line: accepted, then dropped), ``timeout``, ``http`` (another status).
On the end (``--duration``, SIGTERM or SIGINT) it prints the summary as JSON: the counts, the longest time without
an answer (from the end of one answer to the end of the next one) and when it was, and the requests that failed other
than with a 503 carrying Retry-After.

    python3 switch_probe.py --url http://10.0.0.1:8080 --api-key KEY --log probe.jsonl --duration 600

Standard library only: it runs on the controller and on a lab host alike.
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import socket
import sys
import threading
import time
from urllib.parse import urlsplit

OUTCOMES = ("ok", "busy", "refused", "dropped", "timeout", "http")


def classify(status=None, error=None, sent=False):
    """The outcome of one request: from its HTTP status, or from the error and whether the request was sent."""
    if status is not None:
        return "ok" if status == 200 else "busy" if status == 503 else "http"
    if isinstance(error, (TimeoutError, socket.timeout)):
        return "timeout"
    if isinstance(error, ConnectionRefusedError) or not sent:
        return "refused"
    return "dropped"


def request(url, body, headers, timeout):
    """One POST: a record with the outcome, the status, Retry-After and the text of an answer."""
    parts = urlsplit(url)
    started = time.time()
    record = {"start": round(started, 3)}
    sent, status = False, None
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        connection.connect()
        connection.request("POST", parts.path or "/", body=body, headers=headers)
        sent = True
        reply = connection.getresponse()
        status = reply.status
        payload = reply.read()
        record["status"] = status
        if reply.getheader("Retry-After") is not None:
            record["retry_after"] = reply.getheader("Retry-After")
        if status == 200:
            with_text = json.loads(payload or b"{}")
            choice = (with_text.get("choices") or [{}])[0]
            record["text"] = choice.get("text", "")
        else:
            record["body"] = payload[:200].decode("utf-8", "replace")
        record["outcome"] = classify(status=status)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        record["outcome"] = classify(error=exc, sent=sent) if status is None else "http"
        record["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        connection.close()
    record["end"] = round(time.time(), 3)
    return record


def summarize(records, interval=1.0):
    """Counts by outcome, the longest time without an answer and the requests that failed other than with a 503
    that carried Retry-After."""
    records = sorted(records, key=lambda r: r["start"])
    counts = {name: sum(1 for r in records if r["outcome"] == name) for name in OUTCOMES}
    answers = [r["end"] for r in records if r["outcome"] == "ok"]
    gap, since, until = 0.0, None, None
    for before, after in zip(answers, answers[1:], strict=False):
        if after - before > gap:
            gap, since, until = after - before, before, after
    if records and answers:  # an outage at either end (no answer yet, or none any more) counts too
        for before, after in ((records[0]["start"], answers[0]), (answers[-1], records[-1]["end"])):
            if after - before > gap:
                gap, since, until = after - before, before, after
    failed = [
        r for r in records
        if r["outcome"] not in ("ok", "busy") or (r["outcome"] == "busy" and "retry_after" not in r)
    ]  # fmt: skip
    texts = sorted({r.get("text", "") for r in records if r["outcome"] == "ok"})
    return {
        "requests": len(records),
        **counts,
        "busy_without_retry_after": sum(1 for r in records if r["outcome"] == "busy" and "retry_after" not in r),
        "failed": len(failed),
        "failed_examples": [{k: r.get(k) for k in ("start", "outcome", "status", "error")} for r in failed[:5]],
        # The longest time from one answer to the next, less the tick: what a client waiting one tick sees as down.
        "longest_gap_s": round(gap, 2),
        "downtime_s": round(max(gap - interval, 0.0), 2),
        "gap_from": since,
        "gap_until": until,
        "answers_seen": texts[:4],
    }


class Probe:
    """The ticks, the threads in flight and the records (thread-safe)."""

    def __init__(self, args):
        self.args = args
        self.records = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        body = {
            "prompt": args.prompt,
            "max_tokens": args.max_tokens,
            "temperature": 0,
            "cache_prompt": False,
        }
        self.body = json.dumps(body).encode()
        self.headers = {"Content-Type": "application/json"}
        if args.api_key:
            self.headers["Authorization"] = f"Bearer {args.api_key}"
        self.log = open(args.log, "a", encoding="utf-8") if args.log else None  # noqa: SIM115 - closed in run()

    def one(self):
        record = request(self.args.url.rstrip("/") + "/v1/completions", self.body, self.headers, self.args.timeout)
        with self.lock:
            self.records.append(record)
            if self.log:
                self.log.write(json.dumps(record, sort_keys=True) + "\n")
                self.log.flush()

    def run(self):
        threads = []
        ends = time.monotonic() + self.args.duration if self.args.duration else None
        tick = time.monotonic()
        while not self.stop.is_set() and (ends is None or time.monotonic() < ends):
            thread = threading.Thread(target=self.one, daemon=True)
            thread.start()
            threads.append(thread)
            tick += self.args.interval
            self.stop.wait(max(tick - time.monotonic(), 0))
        for thread in threads:
            thread.join(self.args.timeout + 5)
        if self.log:
            self.log.close()
        with self.lock:
            return summarize(self.records, self.args.interval)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--url", required=True, help="llama-server's base URL, e.g. http://10.0.0.1:8080")
    parser.add_argument("--api-key", default="")
    parser.add_argument("--prompt", default="The capital of France is")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between requests")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one request may take")
    parser.add_argument("--duration", type=float, default=0, help="seconds to run (0: until SIGTERM or SIGINT)")
    parser.add_argument("--log", help="append one JSON line per request to this file")
    parser.add_argument("--summary", help="also write the summary JSON to this file")
    args = parser.parse_args(argv)
    probe = Probe(args)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_args: probe.stop.set())
    summary = probe.run()
    text = json.dumps(summary, indent=2, sort_keys=True)
    if args.summary:
        with open(args.summary, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
