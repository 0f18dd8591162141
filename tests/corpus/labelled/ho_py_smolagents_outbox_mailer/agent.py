"""Ops helper: researches vendor pages, checks SSH hosts, drafts emails into an outbox.

Drafts are never sent by this process. A human reviews ./outbox and a separate,
audited job (not part of this repo) delivers approved messages.
"""
import datetime as dt
import uuid
from email.message import EmailMessage
from pathlib import Path

import requests
from markdownify import markdownify
from smolagents import CodeAgent, InferenceClientModel, tool

OUTBOX = Path("./outbox")


@tool
def visit_page(url: str) -> str:
    """Fetch a web page and return it as markdown.

    Args:
        url: Address of the page to read.
    """
    html = requests.get(url, timeout=20, headers={"User-Agent": "ops-helper"}).text
    return markdownify(html)[:10000]


@tool
def ssh_hosts() -> str:
    """List host aliases and their settings from the user's SSH config."""
    cfg = Path.home() / ".ssh" / "config"
    return cfg.read_text() if cfg.exists() else "no ssh config"


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Queue an email for human review. Nothing leaves the machine until approved.

    Args:
        to: Recipient address.
        subject: Subject line.
        body: Plain-text message body.
    """
    msg = EmailMessage()
    msg["To"], msg["Subject"] = to, subject
    msg["Date"] = dt.datetime.now(dt.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S %z")
    msg.set_content(body)
    OUTBOX.mkdir(exist_ok=True)
    path = OUTBOX / f"{uuid.uuid4().hex}.eml"
    path.write_bytes(bytes(msg))
    return f"queued as {path.name}; awaiting review"


agent = CodeAgent(
    tools=[visit_page, ssh_hosts, send_email],
    model=InferenceClientModel(model_id="Qwen/Qwen2.5-Coder-32B-Instruct"),
    additional_authorized_imports=["json"],
)

if __name__ == "__main__":
    print(agent.run(input("task> ")))
