"""A WebSocket client from the `websockets` library, through an HTTP proxy
(CONNECT, then the handshake inside), for the proxy's WebSocket end-to-end
test. Usage: `ws_client.py PROXY BASE DIR`; prints one JSON line per case.
The `revoked` case opens a socket, touches DIR/reload-me, waits for
DIR/go (the policy has changed) and reports whether the socket closed."""

import asyncio
import json
import os
import sys

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

CASES = [
    ("allowed", "/v1/realtime?model=gpt-4o", ["chat"], "https://app.example.com"),
    ("other-offer", "/v1/realtime?model=gpt-4o", ["chat", "v2"], "https://app.example.com"),
    ("other-origin", "/v1/realtime?model=gpt-4o", ["chat"], "https://evil.example.net"),
    ("rest-path-only", "/v1/other", ["chat"], "https://app.example.com"),
    ("denied-query", "/v1/realtime?model=gpt-4o&debug=1", ["chat"], "https://app.example.com"),
]


async def attempt(proxy, base, name, path, subprotocols, origin):
    try:
        async with connect(
            base + path, proxy=proxy, subprotocols=subprotocols, origin=origin, open_timeout=10
        ) as ws:
            await ws.send("hello " + name)
            echo = await asyncio.wait_for(ws.recv(), 10)
            return {"case": name, "ok": True, "echo": echo, "subprotocol": ws.subprotocol}
    except InvalidStatus as e:
        body = e.response.body.decode("utf-8", "replace") if e.response.body else ""
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {"raw": body}
        return {"case": name, "ok": False, "status": e.response.status_code, "body": parsed}


async def revoked(proxy, base, directory):
    async with connect(
        base + "/v1/realtime?model=gpt-4o",
        proxy=proxy,
        subprotocols=["chat"],
        origin="https://app.example.com",
        open_timeout=10,
    ) as ws:
        await ws.send("before")
        before = await asyncio.wait_for(ws.recv(), 10)
        open(os.path.join(directory, "reload-me"), "w").close()
        for _ in range(400):
            if os.path.exists(os.path.join(directory, "go")):
                break
            await asyncio.sleep(0.05)
        try:
            await ws.send("after")
            await asyncio.wait_for(ws.recv(), 5)
            closed = False
        except (ConnectionClosed, asyncio.TimeoutError):
            closed = True
        return {"case": "revoked", "before": before, "closed": closed}


async def main(proxy, base, directory):
    for case in CASES:
        print(json.dumps(await attempt(proxy, base, *case)), flush=True)
    print(json.dumps(await revoked(proxy, base, directory)), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
