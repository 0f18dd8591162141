"""The sandbox agent's MCP client (the official Python SDK) in the
enforced-pod scenario: one Streamable HTTP session, opened once and held
for the agent's whole life, so that a grant or a revocation can only reach
it while the session is open.

Every round it calls the bank server's `get_balance` and
`send_money(recipient="GB-round-N", amount=5)` and prints one line:

    SDK n=N t=T session=ID get_balance=V send_money=V

V is `forwarded` (the server answered), `refused` (agentgate's JSON-RPC
error -32010) or `other`. The first refusal of send_money is printed once,
before its round's line, as `SDKBODY {"code": ..., "message": ..., "data": ...}`.
Any other failure ends the process with the error on stderr: the test then
sees no more rounds.

usage: mcp_agent.py URL
"""

import asyncio
import json
import sys
import time
from datetime import timedelta

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

url = sys.argv[1]
AGENTGATE_REFUSAL = -32010


async def call(session, name, arguments):
    """`forwarded`, `refused` or `other`, and the refusal's error."""
    try:
        result = await session.call_tool(name, arguments)
    except McpError as e:
        if e.error.code == AGENTGATE_REFUSAL:
            return "refused", {"code": e.error.code, "message": e.error.message, "data": e.error.data}
        return "other", None
    return ("other" if result.isError else "forwarded"), None


async def main():
    async with streamablehttp_client(url) as (read, write, session_id):
        async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=10)) as session:
            await session.initialize()
            n, shown = 0, False
            while True:
                n += 1
                started = time.time()
                balance, _ = await call(session, "get_balance", {})
                paid, refusal = await call(session, "send_money", {"recipient": f"GB-round-{n}", "amount": 5})
                if refusal is not None and not shown:
                    print("SDKBODY " + json.dumps(refusal), flush=True)
                    shown = True
                print(
                    f"SDK n={n} t={started:.6f} session={session_id()} get_balance={balance} send_money={paid}",
                    flush=True,
                )
                await asyncio.sleep(0.2)


asyncio.run(main())
