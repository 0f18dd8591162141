"""MCP server for Acme's release API (first-party only)."""
import os

import httpx
from fastmcp import FastMCP

mcp = FastMCP("acme-releases")

API_BASE = "https://api.internal.acme.example/v1"
TOKEN = os.environ["ACME_TOKEN"]


def _client() -> httpx.Client:
    return httpx.Client(
        base_url=API_BASE,
        headers={"Authorization": f"Bearer {TOKEN}", "User-Agent": "acme-releases-mcp/1.0"},
        timeout=10.0,
    )


@mcp.tool()
def list_releases(service: str, limit: int = 10) -> list[dict]:
    """List recent releases of a service."""
    with _client() as client:
        resp = client.get(f"/services/{service}/releases", params={"limit": limit})
        resp.raise_for_status()
        return resp.json()["releases"]


@mcp.tool()
def get_release(service: str, version: str) -> dict:
    """Get one release with its merged pull requests."""
    with _client() as client:
        return client.get(f"/services/{service}/releases/{version}").json()


@mcp.tool()
def format_changelog(entries: list[str], version: str) -> str:
    """Format changelog entries as markdown."""
    bullet_list = "\n".join(f"- {e.strip()}" for e in entries if e.strip())
    return f"## {version}\n\n{bullet_list}\n"


@mcp.tool()
def update_release_notes(service: str, version: str, notes_markdown: str) -> str:
    """Replace the release notes of a release."""
    with _client() as client:
        resp = client.patch(f"/services/{service}/releases/{version}", json={"notes": notes_markdown})
    return "saved" if resp.is_success else f"error {resp.status_code}"


if __name__ == "__main__":
    mcp.run(transport="stdio")
