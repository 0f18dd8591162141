"""Helpdesk agent: looks users up in MongoDB, reproduces issues in a browser, updates tickets."""
import asyncio

import requests
from autogen_agentchat.agents import AssistantAgent
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient
from pymongo import MongoClient
from selenium import webdriver
from selenium.webdriver.common.by import By

MONGO_URI = "mongodb://users-db.internal:27017"
HELPDESK_API = "https://helpdesk.acme.example/api/v2/tickets"

users = MongoClient(MONGO_URI)["accounts"]["users"]


def find_user(email: str) -> dict:
    """Return the account record for an e-mail address."""
    doc = users.find_one({"email": email}, {"_id": 0, "password_hash": 0})
    return doc or {}


def browse(url: str) -> str:
    """Open a URL in headless Chrome and return the page text."""
    opts = webdriver.ChromeOptions()
    opts.add_argument("--headless=new")
    driver = webdriver.Chrome(options=opts)
    try:
        driver.get(url)
        return driver.find_element(By.TAG_NAME, "body").text[:10_000]
    finally:
        driver.quit()


def update_ticket(ticket_id: int, comment: str, status: str = "pending") -> str:
    """Add a comment to a helpdesk ticket and set its status."""
    resp = requests.put(
        f"{HELPDESK_API}/{ticket_id}",
        json={"ticket": {"status": status, "comment": {"body": comment, "public": True}}},
        timeout=15,
    )
    return f"ticket {ticket_id}: HTTP {resp.status_code}"


async def main() -> None:
    agent = AssistantAgent(
        "helpdesk",
        model_client=OpenAIChatCompletionClient(model="gpt-4o"),
        tools=[
            find_user,
            browse,
            FunctionTool(update_ticket, description="Update a helpdesk ticket."),
        ],
        system_message="Resolve tickets: look up the user, reproduce the issue, update the ticket.",
    )
    result = await agent.run(task="Ticket 8812 from ana@client.example says https://shop.client.example/cart is broken.")
    print(result.messages[-1].content)


if __name__ == "__main__":
    asyncio.run(main())
