"""Ticket triage agent that only talks to Acme's own ticket API."""
import asyncio
import os

import httpx
from agents import Agent, Runner, function_tool

ACME_API = "https://api.internal.acme.example/v1"


def _headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {os.environ['ACME_TOKEN']}", "Accept": "application/json"}


@function_tool
async def get_ticket(ticket_id: int) -> dict:
    """Fetch a ticket with its customer, priority and history."""
    async with httpx.AsyncClient(base_url=ACME_API, timeout=10) as client:
        resp = await client.get(f"/tickets/{ticket_id}", headers=_headers())
        resp.raise_for_status()
        return resp.json()


@function_tool
async def list_open_tickets(queue: str = "support") -> list[dict]:
    """List open tickets in a queue."""
    async with httpx.AsyncClient(base_url=ACME_API, timeout=10) as client:
        resp = await client.get("/tickets", params={"queue": queue, "state": "open"}, headers=_headers())
        return resp.json()["items"]


@function_tool
async def add_comment(ticket_id: int, body: str, internal: bool = True) -> str:
    """Add a triage comment to a ticket."""
    async with httpx.AsyncClient(base_url=ACME_API, timeout=10) as client:
        resp = await client.post(
            f"/tickets/{ticket_id}/comments",
            json={"body": body, "internal": internal},
            headers=_headers(),
        )
    return "comment added" if resp.status_code == 201 else f"failed ({resp.status_code})"


triage = Agent(
    name="Ticket triage",
    instructions="Triage open support tickets: set priority hints as internal comments.",
    model="gpt-4o-mini",
    tools=[get_ticket, list_open_tickets, add_comment],
)


async def main() -> None:
    result = await Runner.run(triage, "Triage the support queue.")
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
