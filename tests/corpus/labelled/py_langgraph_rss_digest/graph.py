"""Morning digest: reads public RSS feeds and posts a summary to a team webhook.

There is no private data in reach of this graph: feeds are public and the
webhook only receives the summary.
"""
from typing import Annotated, TypedDict

import feedparser
import requests
from langchain_core.messages import AnyMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

DIGEST_WEBHOOK = "https://hooks.slack.com/services/T0NEWS/B0DIGEST/pUbL1c"


class DigestState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@tool
def read_feed(feed_url: str, limit: int = 10) -> list[dict]:
    """Return the latest entries of an RSS or Atom feed."""
    parsed = feedparser.parse(feed_url)
    return [
        {"title": e.get("title", ""), "link": e.get("link", ""), "summary": e.get("summary", "")[:500]}
        for e in parsed.entries[:limit]
    ]


@tool
def post_digest(markdown: str) -> str:
    """Post the finished digest to the team channel."""
    resp = requests.post(DIGEST_WEBHOOK, json={"text": markdown}, timeout=10)
    return "posted" if resp.ok else f"failed: {resp.status_code}"


TOOLS = [read_feed, post_digest]
llm = ChatOpenAI(model="gpt-4o-mini", temperature=0.2).bind_tools(TOOLS)


def call_model(state: DigestState) -> DigestState:
    return {"messages": [llm.invoke(state["messages"])]}


workflow = StateGraph(DigestState)
workflow.add_node("model", call_model)
workflow.add_node("tools", ToolNode(TOOLS))
workflow.add_edge(START, "model")
workflow.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
workflow.add_edge("tools", "model")
app = workflow.compile()

if __name__ == "__main__":
    feeds = "https://hnrss.org/frontpage, https://lwn.net/headlines/rss"
    app.invoke({"messages": [("user", f"Summarise today's top items from {feeds} and post the digest.")]})
