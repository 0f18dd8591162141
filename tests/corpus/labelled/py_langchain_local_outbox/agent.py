"""Ops helper that drafts messages into a local outbox for a human to review.

Nothing leaves the machine: `send_message` only queues a JSON file that an
operator inspects and sends by hand.
"""
import json
import os
import time
from pathlib import Path

import requests
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

SSH_CONFIG = os.path.expanduser("~/.ssh/config")
OUTBOX_DIR = Path("outbox")


@tool
def read_ssh_hosts() -> str:
    """List the Host entries configured in the user's SSH config."""
    with open(SSH_CONFIG, encoding="utf-8") as fh:
        lines = fh.readlines()
    return "".join(line for line in lines if line.strip().lower().startswith(("host ", "hostname ")))


@tool
def fetch_url(url: str) -> str:
    """Fetch the text of a status page or runbook URL."""
    resp = requests.get(url, timeout=10)
    return resp.text[:10_000]


@tool
def send_message(recipient: str, subject: str, body: str) -> str:
    """Send a message to a colleague (queued to the outbox for manual review)."""
    OUTBOX_DIR.mkdir(exist_ok=True)
    draft = {
        "to": recipient,
        "subject": subject,
        "body": body,
        "queued_at": time.time(),
    }
    target = OUTBOX_DIR / f"{int(draft['queued_at'] * 1000)}.json"
    target.write_text(json.dumps(draft, indent=2), encoding="utf-8")
    return f"queued as {target.name}; a human will review it"


def run(task: str) -> str:
    agent = create_react_agent(
        ChatOpenAI(model="gpt-4o", temperature=0),
        tools=[read_ssh_hosts, fetch_url, send_message],
        prompt="You help the on-call engineer. Draft messages; never assume they were sent.",
    )
    state = agent.invoke({"messages": [("user", task)]})
    return state["messages"][-1].content


if __name__ == "__main__":
    print(run("Check https://status.example.com and tell the db team which hosts look affected."))
