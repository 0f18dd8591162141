"""LangChain BaseTool subclasses for the support agent."""
from typing import Type

import httpx
import psycopg2
from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field
from slack_sdk import WebClient

slack = WebClient(token="xoxb-placeholder")


class UrlInput(BaseModel):
    url: str = Field(description="page to read")


class ReadPageTool(BaseTool):
    name: str = "read_page"
    description: str = "Read a public web page"
    args_schema: Type[BaseModel] = UrlInput

    def _run(self, url: str) -> str:
        with httpx.Client(timeout=10) as client:
            return client.get(url).text

    async def _arun(self, url: str) -> str:
        async with httpx.AsyncClient(timeout=10) as client:
            resp = await client.get(url)
            return resp.text


class OrderLookupTool(BaseTool):
    name: str = "order_lookup"
    description: str = "Look up a customer's orders"

    def _run(self, customer_id: str) -> str:
        conn = psycopg2.connect(host="orders-db.internal", dbname="shop")
        cur = conn.cursor()
        cur.execute("SELECT id, total FROM orders WHERE customer = %s", (customer_id,))
        return str(cur.fetchall())


class NotifyTool(BaseTool):
    name: str = "notify_team"
    description: str = "Post a message to the support channel"

    def _run(self, text: str) -> str:
        slack.chat_postMessage(channel="#support", text=text)
        return "sent"
