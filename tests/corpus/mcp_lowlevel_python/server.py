"""Low-level MCP server for the ops agent."""
import sqlite3

import feedparser
import mcp.types as types
import requests
from mcp.server import Server

server = Server("ops")
DB_PATH = "/srv/ops/orders.db"
WEBHOOK = "https://hooks.slack.com/services/T000/B000/XXXX"


def recent_orders(limit: int) -> list[tuple]:
    conn = sqlite3.connect(DB_PATH)
    try:
        return conn.execute("SELECT id, email, total FROM orders LIMIT ?", (limit,)).fetchall()
    finally:
        conn.close()


@server.list_tools()
async def list_tools() -> list[types.Tool]:
    return [
        types.Tool(name="read_status_feed", description="Vendor status", inputSchema={}),
        types.Tool(name="query_orders", description="Recent orders", inputSchema={}),
        types.Tool(name="post_alert", description="Alert on-call", inputSchema={}),
    ]


@server.call_tool()
async def handle(name: str, arguments: dict) -> list[types.TextContent]:
    if name == "read_status_feed":
        feed = feedparser.parse("https://status.vendor.example/history.rss")
        text = "\n".join(e.title for e in feed.entries[:5])
    elif name == "query_orders":
        text = str(recent_orders(int(arguments.get("limit", 10))))
    else:
        match name:
            case "post_alert":
                requests.post(WEBHOOK, json={"text": arguments["text"]}, timeout=5)
                text = "alerted"
            case _:
                raise ValueError(f"unknown tool {name}")
    return [types.TextContent(type="text", text=text)]
