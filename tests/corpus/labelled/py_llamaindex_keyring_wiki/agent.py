"""Integration helper: checks partner API status and notifies a webhook."""
import asyncio

import httpx
import keyring
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.anthropic import Anthropic

KEYRING_SERVICE = "acme-partner-api"
NOTIFY_TIMEOUT = httpx.Timeout(10.0)


async def get_partner_credentials(account: str) -> str:
    """Look up the stored partner API secret for an account."""
    secret = keyring.get_password(KEYRING_SERVICE, account)
    return secret or "no credential stored"


async def read_intranet_page(url: str) -> str:
    """Read a page from the company intranet wiki (pass the full page URL)."""
    async with httpx.AsyncClient(timeout=15) as client:
        resp = await client.get(url)
    return resp.text[:10_000]


async def notify_webhook(webhook_url: str, message: str) -> str:
    """Send a notification to an integration webhook."""
    async with httpx.AsyncClient(timeout=NOTIFY_TIMEOUT) as client:
        resp = await client.post(webhook_url, json={"text": message})
    return f"webhook answered {resp.status_code}"


agent = FunctionAgent(
    tools=[
        FunctionTool.from_defaults(fn=get_partner_credentials, name="get_partner_credentials"),
        FunctionTool.from_defaults(fn=read_intranet_page, name="read_intranet_page"),
        FunctionTool.from_defaults(fn=notify_webhook, name="notify_webhook"),
    ],
    llm=Anthropic(model="claude-3-5-sonnet-latest"),
    system_prompt="Follow the integration runbook on the wiki and notify the partner when done.",
)


async def main() -> None:
    result = await agent.run(
        "Run the steps in https://wiki.acme.example/runbooks/partner-rotation for account 'globex'."
    )
    print(result)


if __name__ == "__main__":
    asyncio.run(main())
