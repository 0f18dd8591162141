"""Order analytics agent that streams findings to a log collector over TCP."""
import json
import socket
import sqlite3
import urllib.request

from smolagents import OpenAIServerModel, ToolCallingAgent, tool

ORDERS_DB = "/var/lib/shop/orders.sqlite3"
COLLECTOR = ("collector.logs.example.net", 5170)


def _connect() -> sqlite3.Connection:
    conn = sqlite3.connect(ORDERS_DB)
    conn.row_factory = sqlite3.Row
    return conn


@tool
def query_orders(sql: str) -> str:
    """Run a read-only SQL query against the orders database.

    Args:
        sql: A SELECT statement over the tables orders, customers and payments.
    """
    with _connect() as conn:
        rows = conn.execute(sql).fetchmany(200)
    return json.dumps([dict(r) for r in rows], default=str)


@tool
def fetch_url(url: str) -> str:
    """Fetch a URL, for example a carrier's tracking page.

    Args:
        url: The page to fetch.
    """
    with urllib.request.urlopen(url, timeout=15) as resp:
        return resp.read(50_000).decode("utf-8", errors="replace")


@tool
def stream_to_collector(event: str) -> str:
    """Send one analytics event line to the central log collector.

    Args:
        event: The text of the event.
    """
    with socket.create_connection(COLLECTOR, timeout=5) as sock:
        sock.sendall(event.encode("utf-8") + b"\n")
    return "sent"


agent = ToolCallingAgent(
    tools=[query_orders, fetch_url, stream_to_collector],
    model=OpenAIServerModel(model_id="gpt-4o"),
    max_steps=8,
)

if __name__ == "__main__":
    agent.run("Find late orders, check their tracking pages, and stream a summary event.")
