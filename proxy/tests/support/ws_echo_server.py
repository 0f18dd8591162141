"""A WebSocket echo server from the `websockets` library, for the proxy's
WebSocket end-to-end test: usage `ws_echo_server.py HOST PORT LOG`. Each
accepted handshake appends one JSON line to LOG (path, subprotocol,
origin); each text message is sent back."""

import asyncio
import json
import sys

from websockets.asyncio.server import serve


async def main(host: str, port: int, log: str) -> None:
    async def echo(connection):
        with open(log, "a", encoding="utf-8") as out:
            out.write(
                json.dumps(
                    {
                        "path": connection.request.path,
                        "subprotocol": connection.subprotocol,
                        "origin": connection.request.headers.get("Origin"),
                    }
                )
                + "\n"
            )
        async for message in connection:
            await connection.send(message)

    async with serve(echo, host, port, subprotocols=["chat", "v2"]) as server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
