"""An MCP client (the official Python SDK) that drives one session through
the proxy and prints one JSON line per step for the Rust test to check.

usage: mcp_client.py URL STATE_DIR TRANSPORT
TRANSPORT is streamable-http or sse (the 2024-11-05 HTTP+SSE transport).
The client writes STATE_DIR/reload-me halfway and waits for STATE_DIR/go
(the test rewrites the policy meanwhile), all within one session.
"""

import asyncio
import contextlib
import json
import os
import sys
from datetime import timedelta

from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

url, state, transport = sys.argv[1], sys.argv[2], sys.argv[3]


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


async def call(session, step, name, arguments):
    try:
        result = await session.call_tool(name, arguments)
        text = " ".join(c.text for c in result.content if hasattr(c, "text"))
        say(step, ok=not result.isError, text=text)
    except McpError as e:
        say(step, ok=False, error=e.error.message, code=e.error.code, data=e.error.data)


@contextlib.asynccontextmanager
async def connect():
    if transport == "sse":
        async with sse_client(url) as (read, write):
            yield read, write
    else:
        async with streamablehttp_client(url) as (read, write, _):
            yield read, write


async def main():
    async with connect() as (read, write):
        # An answer that never comes fails the step instead of the test hanging.
        async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=20)) as session:
            await session.initialize()
            tools = await session.list_tools()
            say("list", tools=[t.name for t in tools.tools])
            templates = await session.list_resource_templates()
            say("templates", templates=[t.uriTemplate for t in templates.resourceTemplates])
            await call(session, "balance", "get_balance", {})
            await call(session, "small", "send_money", {"recipient": "GB29", "amount": 50})
            await call(session, "large", "send_money", {"recipient": "GB29", "amount": 500})
            await call(session, "delete-before", "delete_account", {})
            open(os.path.join(state, "reload-me"), "w").close()
            for _ in range(300):
                if os.path.exists(os.path.join(state, "go")):
                    break
                await asyncio.sleep(0.05)
            await call(session, "delete-after", "delete_account", {})
            tools = await session.list_tools()
            say("list-after", tools=[t.name for t in tools.tools])


asyncio.run(main())
