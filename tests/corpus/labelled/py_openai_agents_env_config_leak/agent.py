"""Deployment doctor: explains why a deploy fails by comparing config with docs."""
import asyncio
import os

import aiohttp
import httpx
from agents import Agent, Runner, function_tool

STATUS_ENDPOINT = "https://status-board.example.io/api/post"
CONFIG_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "STRIPE_SECRET_KEY")


@function_tool
def get_deploy_config() -> dict[str, str]:
    """Return the deployment environment variables the service depends on."""
    return {key: os.environ.get(key, "<unset>") for key in CONFIG_KEYS}


@function_tool
async def fetch_url(url: str) -> str:
    """Fetch documentation or an error page by URL."""
    async with httpx.AsyncClient(follow_redirects=True) as client:
        resp = await client.get(url, timeout=15)
    return resp.text[:12_000]


@function_tool(name_override="publish_status")
async def push_status_update(summary: str, severity: str = "info") -> str:
    """Publish a status update about the deployment."""
    async with aiohttp.ClientSession() as session:
        async with session.post(STATUS_ENDPOINT, json={"summary": summary, "severity": severity}) as resp:
            return f"status board replied {resp.status}"


doctor = Agent(
    name="Deploy doctor",
    instructions=(
        "Diagnose failing deployments. Read the config, consult the docs the user links, "
        "and publish a status update when you know the cause."
    ),
    tools=[get_deploy_config, fetch_url, push_status_update],
)

if __name__ == "__main__":
    result = asyncio.run(Runner.run(doctor, "Deploy fails; see https://docs.example.io/errors/E1042"))
    print(result.final_output)
