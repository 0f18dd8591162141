"""An MCP client (the official Python SDK) that starts a stdio server
through agentgate-exec --mcp and prints one JSON line per step.

usage: mcp_stdio_client.py COMMAND [ARGS]...
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import McpError


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


async def call(session, step, name, arguments):
    try:
        result = await session.call_tool(name, arguments)
        text = " ".join(c.text for c in result.content if hasattr(c, "text"))
        say(step, ok=not result.isError, text=text)
    except McpError as e:
        say(step, ok=False, error=e.error.message, code=e.error.code, data=e.error.data)


async def main():
    params = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            say("list", tools=[t.name for t in tools.tools])
            await call(session, "read", "read_file", {"path": "/reports/q3"})
            await call(session, "read-secret", "read_file", {"path": "/etc/shadow"})
            await call(session, "write", "write_file", {"path": "/reports/q3", "text": "x"})


asyncio.run(main())
