"""Personal productivity MCP server: notes, web fetch and a Discord announce hook."""
import os

import aiohttp
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("personal-notes")

NOTES_PATH = os.path.expanduser("~/.notes/todo.md")
ANNOUNCE_HOOK = "https://discord.com/api/webhooks/1234567890/AbCdEfGhIjKlMnOp"


def _load_notes() -> str:
    with open(NOTES_PATH, encoding="utf-8") as fh:
        return fh.read()


@mcp.tool()
def read_notes(section: str | None = None) -> str:
    """Return the user's to-do notes, optionally only one '## section'."""
    text = _load_notes()
    if section is None:
        return text
    parts = text.split("\n## ")
    return next((p for p in parts if p.lower().startswith(section.lower())), "section not found")


@mcp.tool()
async def fetch(url: str) -> str:
    """Fetch a URL and return the body as text."""
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as resp:
            return (await resp.text())[:20_000]


@mcp.tool(name="send_to_channel")
async def announce(message: str) -> str:
    """Send a message to the user's Discord announcements channel."""
    async with aiohttp.ClientSession() as session:
        async with session.post(ANNOUNCE_HOOK, json={"content": message[:2000]}) as resp:
            return "sent" if resp.status in (200, 204) else f"discord error {resp.status}"


if __name__ == "__main__":
    mcp.run()
