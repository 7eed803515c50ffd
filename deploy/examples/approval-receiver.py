#!/usr/bin/env python3
"""An example receiver for airlock's approval webhook (docs/policy.md, "Approval webhook").

It checks each ask's signature, then answers from a decisions file that a person (or a chat
bot) edits while the agent waits: a JSON object mapping a host to "grant", "grant:30m",
"grant:sandbox" or "deny". A host not in the file is answered "pending": the sidecar polls
again every pollInterval until askTTL, so a line added minutes later serves the agent's retry.

  AIRLOCK_HOOK_KEY=... python3 approval-receiver.py --listen 127.0.0.1:8787 --decisions decisions.json

The key is the value of the policy secret named by spec.approval.approvers.webhook.secret.
Standard library only. Put it behind TLS (or on a private network) in production.
"""

import argparse
import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEY = os.environ.get("AIRLOCK_HOOK_KEY", "").encode()
SKEW = 300  # seconds; the sidecar refuses answers further off than 5 minutes


def sign_body(ts: str, body: bytes) -> str:
    return "v1=" + hmac.new(KEY, ts.encode() + b"." + body, hashlib.sha256).hexdigest()


def sign_answer(a: dict) -> str:
    text = "".join(f"{a[k]}\n" for k in ("id", "nonce", "decision", "scope", "for", "approver", "timestamp"))
    return "v1=" + hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()


def decide(decisions_file: str, host: str) -> tuple:
    """Returns (decision, scope, for) for host from the decisions file."""
    try:
        with open(decisions_file) as f:
            entry = json.load(f).get(host)
    except (OSError, ValueError):
        entry = None
    if entry is None:
        return "pending", "", ""
    if entry == "deny":
        return "deny", "", ""
    _, _, arg = entry.partition(":")
    if arg == "sandbox":
        return "grant", "sandbox", ""
    if arg:
        return "grant", "duration", arg
    return "grant", "once", ""


class Handler(BaseHTTPRequestHandler):
    decisions = "decisions.json"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        ts = self.headers.get("X-Airlock-Timestamp", "")
        sig = self.headers.get("X-Airlock-Signature", "")
        if not ts.isdigit() or abs(time.time() - int(ts)) > SKEW or not hmac.compare_digest(sig, sign_body(ts, body)):
            self.send_error(401, "bad signature")
            return
        ask = json.loads(body)
        decision, scope, dur = decide(self.decisions, ask["host"])
        sys.stderr.write(f"{ask['type']} {ask['id']}: {ask['sandbox']} wants {ask['host']}:{ask['ports']} "
                         f"via {ask['via']} {ask.get('method', '')} {ask.get('path', '')} -> {decision}\n")
        answer = {"id": ask["id"], "nonce": ask["nonce"], "decision": decision, "scope": scope, "for": dur,
                  "approver": os.environ.get("USER", "receiver"), "timestamp": int(time.time())}
        answer["signature"] = sign_answer(answer)
        out = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", default="127.0.0.1:8787")
    p.add_argument("--decisions", default="decisions.json")
    args = p.parse_args()
    if not KEY:
        sys.exit("set AIRLOCK_HOOK_KEY to the policy secret's value")
    Handler.decisions = args.decisions
    host, _, port = args.listen.rpartition(":")
    ThreadingHTTPServer((host, int(port)), Handler).serve_forever()


if __name__ == "__main__":
    main()
