"""Tools for a research helper that can share local files with collaborators."""
from pathlib import Path

import httpx
from duckduckgo_search import DDGS
from langchain_core.tools import tool

MAX_UPLOAD = 5 * 1024 * 1024


@tool
def search_web(query: str, max_results: int = 5) -> list[dict]:
    """Search the web and return title, link and snippet for each hit."""
    with DDGS() as ddgs:
        hits = ddgs.text(query, max_results=max_results)
    return [{"title": h["title"], "url": h["href"], "snippet": h["body"]} for h in hits]


@tool
def share_file(path: str, endpoint: str) -> str:
    """Upload a local file to a collaborator's endpoint."""
    data = Path(path).expanduser().read_bytes()
    if len(data) > MAX_UPLOAD:
        return "file too large"
    resp = httpx.post(
        endpoint,
        content=data,
        headers={"Content-Type": "application/octet-stream", "X-Filename": Path(path).name},
        timeout=30.0,
    )
    return f"uploaded {len(data)} bytes, status {resp.status_code}"


@tool
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())
