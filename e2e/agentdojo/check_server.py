"""Checks suite_server.py against AgentDojo itself, with the official MCP
SDK's client: the server lists exactly the suite's tools with AgentDojo's
schemas, and every ground-truth call of the suite's first user task
(run in order, on a fresh environment with every injection vector filled)
answers over MCP exactly what AgentDojo's own runtime answers on its own
copy of the environment. Prints one JSON line with what it compared and
exits non-zero on the first difference.

usage: check_server.py SUITE URL [BENCHMARK_VERSION]
(URL is the server's base, e.g. http://127.0.0.1:8931)
"""

import asyncio
import json
import sys
import urllib.request

from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.functions_runtime import FunctionsRuntime
from agentdojo.task_suite import get_suite
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

suite_name, base = sys.argv[1], sys.argv[2]
version = sys.argv[3] if len(sys.argv) > 3 else "v1.2.2"
suite = get_suite(version, suite_name)


def fail(what):
    print(json.dumps({"suite": suite_name, "ok": False, "difference": what}), flush=True)
    sys.exit(1)


def reset(injections):
    request = urllib.request.Request(
        f"{base}/environment",
        data=json.dumps({"injections": injections}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


async def main():
    vectors = sorted(suite.get_injection_vector_defaults())
    marker = {v: f"CHECK-MARKER {v}" for v in vectors}
    if reset(marker)["vectors"] != vectors:
        fail("the server's injection vectors differ")
    env = suite.load_and_inject_default_environment(marker)
    runtime = FunctionsRuntime(suite.tools)
    task = suite.user_tasks["user_task_0"]
    calls = task.ground_truth(env.model_copy(deep=True))
    async with streamablehttp_client(f"{base}/mcp") as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = {t.name: t for t in (await session.list_tools()).tools}
            for tool in suite.tools:
                got = listed.pop(tool.name, None)
                if got is None:
                    fail(f"{tool.name} is not listed")
                if got.inputSchema != tool.parameters.model_json_schema() or got.description != tool.description:
                    fail(f"{tool.name} is listed with another schema or description")
            if listed:
                fail(f"tools AgentDojo does not have: {sorted(listed)}")
            for call in calls:
                result, error = runtime.run_function(env, call.function, dict(call.args))
                want = error if error is not None else tool_result_to_str(result)
                answer = await session.call_tool(call.function, dict(call.args))
                got = " ".join(c.text for c in answer.content if hasattr(c, "text"))
                if got != want or answer.isError != (error is not None):
                    fail(f"{call.function}: {got[:200]!r} instead of {want[:200]!r}")
    print(
        json.dumps({"suite": suite_name, "ok": True, "tools": len(suite.tools), "calls": [c.function for c in calls]}),
        flush=True,
    )


asyncio.run(main())
