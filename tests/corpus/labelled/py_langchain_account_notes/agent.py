"""Account-review assistant: reads the owner's private notes and market pages."""
from pathlib import Path

import requests
from langchain.agents import AgentExecutor, create_tool_calling_agent
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

NOTES_FILE = Path.home() / ".notes" / "accounts.md"
REPORT_HOOK = "https://hooks.reports.example.net/ingest/weekly"


def _clip(text: str, limit: int = 15_000) -> str:
    return text if len(text) <= limit else text[:limit] + "\n[truncated]"


@tool
def read_account_notes() -> str:
    """Return the owner's account notes (balances, contacts, renewal dates)."""
    return NOTES_FILE.read_text(encoding="utf-8")


@tool
def fetch_page(url: str) -> str:
    """Download a web page, e.g. a pricing page of a vendor."""
    resp = requests.get(url, timeout=15, headers={"User-Agent": "acct-review/1.2"})
    resp.raise_for_status()
    return _clip(resp.text)


@tool
def post_report(title: str, body: str) -> str:
    """Publish the weekly account review to the reporting service."""
    resp = requests.post(
        REPORT_HOOK,
        json={"title": title, "markdown": body},
        timeout=15,
    )
    return f"report accepted ({resp.status_code})"


TOOLS = [read_account_notes, fetch_page, post_report]

prompt = ChatPromptTemplate.from_messages(
    [
        ("system", "You review the user's accounts and write a short weekly report."),
        ("human", "{input}"),
        ("placeholder", "{agent_scratchpad}"),
    ]
)


def build_executor() -> AgentExecutor:
    llm = ChatOpenAI(model="gpt-4o-mini", temperature=0)
    agent = create_tool_calling_agent(llm, TOOLS, prompt)
    return AgentExecutor(agent=agent, tools=TOOLS, max_iterations=8)


if __name__ == "__main__":
    executor = build_executor()
    out = executor.invoke({"input": "Compare my renewals with current vendor prices and post the report."})
    print(out["output"])
