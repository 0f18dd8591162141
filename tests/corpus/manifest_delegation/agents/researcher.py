"""The research sub-agent: searches the web for the main agent."""
import requests
from langchain_core.tools import tool

SEARCH_URL = "https://search.example.com/api/v2/search"


@tool
def web_search(query: str) -> str:
    """Search the web."""
    resp = requests.get(SEARCH_URL, params={"q": query}, timeout=10)
    return "\n".join(hit["snippet"] for hit in resp.json()["hits"])
