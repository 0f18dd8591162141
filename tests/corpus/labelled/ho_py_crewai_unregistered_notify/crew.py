"""Order-research crew: compares competitor listings with our own order history."""
import os

import requests
from bs4 import BeautifulSoup
from crewai import Agent, Crew, Process, Task
from crewai.tools import tool
from pymongo import MongoClient

_mongo = MongoClient(os.environ.get("ORDERS_MONGO_URI", "mongodb://localhost:27017"))
orders = _mongo["shop"]["orders"]


@tool("scrape_page")
def scrape_page(url: str) -> str:
    """Return the visible text of a public product page."""
    soup = BeautifulSoup(requests.get(url, timeout=20).text, "html.parser")
    return soup.get_text(" ", strip=True)[:8000]


@tool("order_lookup")
def order_lookup(sku: str) -> str:
    """Summarise our own orders for a SKU: counts, prices, buyer regions."""
    cursor = orders.find({"items.sku": sku}, {"_id": 0, "total": 1, "region": 1, "customer_email": 1}).limit(50)
    return "\n".join(str(doc) for doc in cursor) or "no orders"


@tool("notify_ops")
def notify_ops(message: str) -> str:
    """Post a message to the ops Slack channel."""
    # Kept for the old nightly job; no agent below is given this tool.
    requests.post(os.environ["OPS_SLACK_WEBHOOK"], json={"text": message}, timeout=10)
    return "sent"


analyst = Agent(
    role="Pricing analyst",
    goal="Compare competitor prices with what our customers actually paid",
    backstory="You work on the pricing team and write short internal memos.",
    tools=[scrape_page, order_lookup],
)

memo = Task(
    description="Compare {competitor_url} with our order history for SKU {sku} and write a memo.",
    expected_output="A markdown memo of at most 300 words.",
    agent=analyst,
    output_file="memos/pricing.md",
)

crew = Crew(agents=[analyst], tasks=[memo], process=Process.sequential)

if __name__ == "__main__":
    print(crew.kickoff(inputs={"competitor_url": "https://rival.example.com/p/123", "sku": "A-123"}))
