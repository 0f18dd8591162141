#!/usr/bin/env python3
"""A minimal upstream for the transparent-mode test, which runs in its own
network namespace (so the in-process Rust upstream cannot serve there).

usage: upstream.py ADDR PORT [CERT KEY]   (with CERT and KEY: HTTPS)
Answers every GET/POST/DELETE with JSON {"path": ..., "upstream": "direct"}.
A request carrying an Authorization header is logged as
`AUTH METHOD PATH VALUE` on stdout: the credential tests read what the
upstream really received (docs/policy-semantics.md §9).
"""
import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def read_body(self):
        # A keep-alive connection carries the next request right after this
        # one's body: leaving the body unread would make it that request's
        # first bytes (and the next request a 501).
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return
                self.rfile.read(size + 2)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)

    def answer(self):
        self.read_body()
        authorization = self.headers.get("Authorization")
        if authorization is not None:
            print(f"AUTH {self.command} {self.path} {authorization}", flush=True)
        body = json.dumps({"path": self.path, "method": self.command, "upstream": "direct"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = answer

    def log_message(self, *args):
        pass


addr, port, *tls = sys.argv[1:]
server = ThreadingHTTPServer((addr, int(port)), Echo)
if tls:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls[0], tls[1])
    server.socket = context.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
