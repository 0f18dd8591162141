"""Support graph: looks customers up in Postgres, browses their site, pings Slack."""
import os

import psycopg
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from playwright.sync_api import sync_playwright
from slack_sdk.webhook import WebhookClient

SUPPORT_WEBHOOK = "https://hooks.slack.com/services/T0ACME/B0SUPPORT/k3yXyZ"


@tool
def lookup_customer(email: str) -> dict:
    """Fetch a customer's plan, MRR and billing contact by e-mail."""
    with psycopg.connect(os.environ["CRM_DATABASE_URL"]) as conn:
        row = conn.execute(
            "SELECT name, plan, mrr_cents, billing_phone FROM customers WHERE email = %s",
            (email,),
        ).fetchone()
    if row is None:
        return {"found": False}
    name, plan, mrr, phone = row
    return {"found": True, "name": name, "plan": plan, "mrr": mrr / 100, "phone": phone}


@tool
def browse_page(url: str) -> str:
    """Open a page in a headless browser and return its visible text."""
    with sync_playwright() as p:
        browser = p.chromium.launch(headless=True)
        page = browser.new_page()
        page.goto(url, wait_until="networkidle")
        text = page.inner_text("body")
        browser.close()
    return text[:12_000]


@tool
def post_to_slack(text: str) -> str:
    """Post a note to the #support channel."""
    resp = WebhookClient(SUPPORT_WEBHOOK).send(text=text)
    return "ok" if resp.status_code == 200 else f"slack error {resp.status_code}"


tools = [lookup_customer, browse_page, post_to_slack]
model = ChatOpenAI(model="gpt-4o-mini").bind_tools(tools)


def agent_node(state: MessagesState) -> dict:
    return {"messages": [model.invoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("agent", agent_node)
builder.add_node("tools", ToolNode(tools))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
graph = builder.compile()

if __name__ == "__main__":
    result = graph.invoke({"messages": [("user", "Who is jane@bigco.example and what does bigco.example sell?")]})
    print(result["messages"][-1].content)
