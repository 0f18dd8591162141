"""A stdio MCP server (the official Python SDK) for agentgate-exec --mcp's
test. Every tool call it receives is appended to the log file named by the
first argument.

usage: mcp_files_server.py CALL_LOG
"""

import json
import sys

from mcp.server.fastmcp import FastMCP

log_path = sys.argv[1]
mcp = FastMCP("files")


def record(name, arguments):
    with open(log_path, "a") as log:
        log.write(json.dumps({"tool": name, "arguments": arguments}) + "\n")


@mcp.tool()
def read_file(path: str) -> str:
    """Reads a file."""
    record("read_file", {"path": path})
    return f"contents of {path}"


@mcp.tool()
def write_file(path: str, text: str) -> str:
    """Writes a file."""
    record("write_file", {"path": path})
    return "written"


if __name__ == "__main__":
    mcp.run(transport="stdio")
