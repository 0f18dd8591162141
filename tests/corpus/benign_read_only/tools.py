"""Research helper: reads public sources, writes nothing, holds no secrets."""
import feedparser
import requests
import wikipedia
from langchain_core.tools import tool

ARXIV = "https://export.arxiv.org/api/query"


@tool
def arxiv_search(query: str, max_results: int = 5) -> str:
    """Search arXiv for papers."""
    feed = feedparser.parse(f"{ARXIV}?search_query=all:{query}&max_results={max_results}")
    return "\n".join(f"{e.title} ({e.link})" for e in feed.entries)


@tool
def fetch_page(url: str) -> str:
    """Fetch a web page."""
    return requests.get(url, timeout=15).text[:10_000]


@tool
def summarize_numbers(values: list[float]) -> dict:
    """Mean, min and max of a list."""
    return {"mean": sum(values) / len(values), "min": min(values), "max": max(values)}
