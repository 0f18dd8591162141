"""Tools for the issue-triage agent."""
import os

import requests
from langchain_core.tools import tool

GITHUB_API = "https://api.github.com"
REPO = "acme/webshop"


@tool
def read_issue(number: int) -> str:
    """Return the title and body of a GitHub issue."""
    resp = requests.get(f"{GITHUB_API}/repos/{REPO}/issues/{number}", timeout=10)
    resp.raise_for_status()
    data = resp.json()
    return f"{data['title']}\n\n{data['body']}"


@tool("fetch_url")
def fetch_page(url: str) -> str:
    """Fetch a web page linked from an issue."""
    return requests.get(url, timeout=10).text[:20_000]


@tool
def post_comment(number: int, body: str) -> str:
    """Post a comment on an issue."""
    token = os.environ["GITHUB_TOKEN"]
    resp = requests.post(
        f"https://api.github.com/repos/{REPO}/issues/{number}/comments",
        json={"body": body},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    return "posted" if resp.ok else f"failed: {resp.status_code}"


@tool
def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())
