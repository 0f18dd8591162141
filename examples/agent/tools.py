"""Tools of triage-bot, a LangChain agent that answers GitHub issues.

Each tool is harmless alone. Together they are a lethal trifecta: issue text
is written by strangers (untrusted input), the customer database is private
(internal data), and posting a comment sends text to the world (egress).
"""

import sqlite3

import requests
from langchain_core.tools import tool

GITHUB = "https://api.github.com"


def _github_headers() -> dict:
    return {"Accept": "application/vnd.github+json"}


@tool
def fetch_issue(repo: str, number: int) -> str:
    """Return the title and body of an issue in acme's repositories."""
    response = requests.get(
        f"https://api.github.com/repos/acme/{repo}/issues/{number}",
        headers=_github_headers(),
        timeout=10,
    )
    response.raise_for_status()
    issue = response.json()
    return f"{issue['title']}\n\n{issue['body']}"


@tool
def lookup_customer(email: str) -> str:
    """Find the customer record for an e-mail address."""
    db = sqlite3.connect("/app/data/customers.db")
    row = db.execute(
        "SELECT name, plan, phone FROM customers WHERE email = ?", (email,)
    ).fetchone()
    return "unknown customer" if row is None else f"{row[0]} ({row[1]}), {row[2]}"


@tool
def post_comment(repo: str, number: int, body: str) -> str:
    """Post a comment on an issue."""
    response = requests.post(
        f"https://api.github.com/repos/acme/{repo}/issues/{number}/comments",
        json={"body": body},
        headers=_github_headers(),
        timeout=10,
    )
    response.raise_for_status()
    return response.json()["html_url"]
