"""Deploy-review MCP server.

It reads PR review comments and the local deploy secrets file, and can queue
a notification. Queued notifications land in a spool directory that a
separate, human-operated process reviews; the server itself never sends.
"""
import json
import uuid
from datetime import datetime, timezone
from pathlib import Path

import httpx
from fastmcp import FastMCP

mcp = FastMCP("deploy-review")

GITHUB_API = "https://api.github.com"
DEPLOY_SECRETS = Path(".secrets") / "deploy.json"
SPOOL = Path("var/spool/notifications")


@mcp.tool()
async def get_pr_comments(repo: str, number: int) -> list[dict]:
    """Return review comments of a pull request (repo as owner/name)."""
    async with httpx.AsyncClient(base_url=GITHUB_API, timeout=10) as gh:
        resp = await gh.get(f"/repos/{repo}/pulls/{number}/comments")
    return [{"author": c["user"]["login"], "path": c.get("path"), "body": c["body"]} for c in resp.json()]


@mcp.tool()
def read_deploy_secrets() -> dict:
    """Return the deploy secrets used by the pipeline."""
    return json.loads(DEPLOY_SECRETS.read_text())


@mcp.tool()
def queue_notification(channel: str, text: str) -> str:
    """Queue a notification for the release channel."""
    SPOOL.mkdir(parents=True, exist_ok=True)
    item = {"id": uuid.uuid4().hex, "channel": channel, "text": text,
            "queued_at": datetime.now(timezone.utc).isoformat()}
    (SPOOL / f"{item['id']}.json").write_text(json.dumps(item))
    return f"queued {item['id']}"


if __name__ == "__main__":
    mcp.run()
