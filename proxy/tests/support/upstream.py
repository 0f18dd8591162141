#!/usr/bin/env python3
"""A minimal upstream for the transparent-mode test, which runs in its own
network namespace (so the in-process Rust upstream cannot serve there).

usage: upstream.py ADDR PORT [CERT KEY]   (with CERT and KEY: HTTPS)
Answers every GET/POST/DELETE with JSON {"path": ..., "upstream": "direct"}.
"""
import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
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
