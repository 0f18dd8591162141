"""Status-page bot: reads public pages and posts to a public webhook."""
import httpx
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("status-bot")
STATUS_HOOK = "https://hooks.example.com/status"


@mcp.tool()
async def check_site(url: str) -> str:
    """HTTP status of a public site."""
    async with httpx.AsyncClient(timeout=5) as client:
        resp = await client.get(url)
    return f"{url}: {resp.status_code}"


@mcp.tool(annotations={"readOnlyHint": False, "openWorldHint": True})
async def post_status(message: str) -> str:
    """Post a status line to the public status page."""
    async with httpx.AsyncClient(timeout=5) as client:
        await client.post(STATUS_HOOK, json={"text": message})
    return "posted"
