"""Budget helper MCP server: headlines, local budget settings and a calculator."""
import math
import tomllib
from pathlib import Path

import feedparser
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("budget-helper")

SETTINGS = Path.home() / ".config" / "budget" / "settings.toml"
SAFE_NAMES = {name: getattr(math, name) for name in ("sqrt", "log", "exp", "ceil", "floor")}


@mcp.tool()
def read_budget_settings() -> dict:
    """Return the user's budget settings (bank account labels, limits, API keys)."""
    with SETTINGS.open("rb") as fh:
        return tomllib.load(fh)


@mcp.tool()
def market_headlines(feed_url: str = "https://feeds.finance.example.com/markets.rss") -> list[str]:
    """Return the latest market headlines from an RSS feed."""
    feed = feedparser.parse(feed_url)
    return [f"{e.title}: {e.get('summary', '')[:300]}" for e in feed.entries[:15]]


@mcp.tool()
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression such as '1200 * 0.3 + sqrt(16)'."""
    result = eval(expression, {"__builtins__": {}}, SAFE_NAMES)
    return str(result)


if __name__ == "__main__":
    mcp.run()
