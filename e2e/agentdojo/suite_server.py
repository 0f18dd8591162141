"""One AgentDojo suite's tools as an MCP server (the official Python SDK,
Streamable HTTP at /mcp), over the suite's environment, for the AgentDojo
replay through agentgate-proxy.

Every tool of the suite is listed with the description and JSON schema
AgentDojo gives its models. A call runs the tool as AgentDojo's own agent
loop does (`FunctionsRuntime.run_function` on the environment, which it
changes in place) and answers with the text AgentDojo would put in front of
the model (`tool_result_to_str`); a tool's error is an `isError` result with
AgentDojo's error text. Each call that reaches the server is appended, as a
JSON line `{"tool", "arguments"}`, to CALL_LOG, so a replay can show which
calls the proxy let through.

`POST /environment` with `{"injections": {VECTOR: TEXT}}` starts a fresh
environment, the suite's default with those injection vectors filled
(`load_and_inject_default_environment`, so the text is read as the
benchmark reads it), and answers `{"vectors": [...]}`: the driver calls it
directly before each trace, not through the proxy.

usage: suite_server.py SUITE HOST PORT CALL_LOG [BENCHMARK_VERSION]
(BENCHMARK_VERSION defaults to v1.2.2, AgentDojo's own default).
"""

import contextlib
import json
import sys

import uvicorn
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.functions_runtime import FunctionsRuntime
from agentdojo.task_suite import get_suite
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

suite_name, host, port, call_log = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
version = sys.argv[5] if len(sys.argv) > 5 else "v1.2.2"
suite = get_suite(version, suite_name)
runtime = FunctionsRuntime(suite.tools)
state = {"env": suite.load_and_inject_default_environment({})}

server = Server(f"agentdojo-{suite_name}")


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    return [
        types.Tool(name=t.name, description=t.description, inputSchema=t.parameters.model_json_schema())
        for t in suite.tools
    ]


# AgentDojo checks the arguments itself and its error text is what the
# benchmark's models read: no second validation here.
@server.call_tool(validate_input=False)
async def call_tool(name: str, arguments: dict) -> types.CallToolResult:
    with open(call_log, "a") as log:
        log.write(json.dumps({"tool": name, "arguments": arguments}) + "\n")
    result, error = runtime.run_function(state["env"], name, arguments)
    if error is not None:
        return types.CallToolResult(content=[types.TextContent(type="text", text=error)], isError=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=tool_result_to_str(result))])


async def environment(request: Request) -> JSONResponse:
    try:
        body = await request.json()
        injections = body.get("injections", {})
        if not isinstance(injections, dict):
            raise ValueError("injections is not an object")
        state["env"] = suite.load_and_inject_default_environment(injections)
    except (ValueError, TypeError) as e:
        return JSONResponse({"error": str(e)}, status_code=400)
    return JSONResponse({"vectors": sorted(suite.get_injection_vector_defaults())})


sessions = StreamableHTTPSessionManager(app=server)


class McpEndpoint:
    """The session manager as an ASGI app (a class, so that Starlette's
    Route serves /mcp itself rather than treating it as a request handler)."""

    async def __call__(self, scope, receive, send):
        await sessions.handle_request(scope, receive, send)


@contextlib.asynccontextmanager
async def lifespan(app):
    async with sessions.run():
        print(f"ready: {suite_name} ({version}), {len(suite.tools)} tools", flush=True)
        yield


app = Starlette(
    routes=[Route("/environment", environment, methods=["POST"]), Route("/mcp", endpoint=McpEndpoint())],
    lifespan=lifespan,
)

if __name__ == "__main__":
    uvicorn.run(app, host=host, port=port, log_level="warning")
