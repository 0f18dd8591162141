#!/usr/bin/env python3
"""Test client of agentgate-proxy: CONNECT through the explicit proxy, then
HTTP/1.1 requests on one keep-alive TLS connection.

usage: tunnel_client.py PROXY_HOST:PORT HOST:PORT CAFILE STEP...
STEP is "METHOD /path" (a request; "METHOD /path|Name: value|..." adds
headers, a Host among them replacing the default one, and "@body: TEXT"
among them sends TEXT as the body), "wait FILE" (block
until FILE exists), "split SECONDS METHOD /path" (the request's head sent in
two halves SECONDS apart), or, first, "before-tls FILE" (wait for FILE
between the CONNECT and the TLS handshake).
Prints one JSON object per line: the CONNECT answer, then one per request.
"""
import http.client
import json
import os
import socket
import ssl
import sys
import time


def wait_for(path):
    deadline = time.time() + 30
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)


def main():
    proxy, target, cafile, *steps = sys.argv[1:]
    proxy_host, proxy_port = proxy.rsplit(":", 1)
    host, port = target.rsplit(":", 1)
    sock = socket.create_connection((proxy_host, int(proxy_port)), timeout=20)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(65536)
        if not chunk:
            break
        head += chunk
    status = int(head.split(b" ")[1])
    if status != 200:
        body = head.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in head else b""
        print(json.dumps({"connect": status, "body": json.loads(body or b"null")}))
        return
    print(json.dumps({"connect": 200}), flush=True)
    if steps and steps[0].startswith("before-tls "):
        wait_for(steps.pop(0).split(" ", 1)[1])
    try:
        tls = ssl.create_default_context(cafile=cafile).wrap_socket(sock, server_hostname=host)
    except Exception as e:  # the proxy closed the tunnel
        print(json.dumps({"error": type(e).__name__}), flush=True)
        return
    conn = http.client.HTTPConnection(host, int(port))
    conn.sock = tls
    conn.auto_open = 0  # never reconnect around the proxy
    for step in steps:
        verb, arg = step.split(" ", 1)
        if verb == "wait":
            wait_for(arg)
            continue
        if verb == "split":
            pause, method, path = arg.split(" ", 2)
            head = f"{method} {path} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()
            try:
                tls.sendall(head[:9])
                time.sleep(float(pause))
                tls.sendall(head[9:])
                response = http.client.HTTPResponse(tls, method=method)
                response.begin()
                response.read()
                print(json.dumps({"status": response.status}), flush=True)
            except Exception as e:
                print(json.dumps({"error": type(e).__name__}), flush=True)
            continue
        path, *headers = arg.split("|")
        body = None
        for h in [h for h in headers if h.startswith("@body:")]:
            headers.remove(h)
            body = h.split(":", 1)[1].strip().encode()
        try:
            named_host = any(h.lower().startswith("host:") for h in headers)
            conn.putrequest(verb, path, skip_host=named_host, skip_accept_encoding=True)
            for h in headers:
                name, value = h.split(":", 1)
                conn.putheader(name.strip(), value.strip())
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            body = response.read()
            try:
                body = json.loads(body)
            except ValueError:
                body = body.decode(errors="replace")
            print(json.dumps({
                "status": response.status,
                "decision": response.getheader("X-Agentgate-Decision"),
                "connection": response.getheader("Connection"),
                "body": body,
            }), flush=True)
        except Exception as e:  # the proxy closed the connection, as a revocation does
            print(json.dumps({"error": type(e).__name__}), flush=True)


main()
