"""Newsletter drafting agent.

It may look up the signing key name in the keyring and search the web, but
its only output channel is a drafts folder on disk that an editor reviews.
"""
from datetime import date
from pathlib import Path

import keyring
from pydantic import BaseModel
from pydantic_ai import Agent
from tavily import TavilyClient

DRAFTS = Path("drafts")
tavily = TavilyClient()


class Draft(BaseModel):
    headline: str
    body_markdown: str


agent = Agent(
    "anthropic:claude-3-5-sonnet-latest",
    output_type=Draft,
    system_prompt="Write a short newsletter about the requested topic and save it as a draft.",
)


@agent.tool_plain
async def web_search(query: str) -> list[dict]:
    """Search the web and return the top results with their content."""
    res = tavily.search(query, max_results=5, include_raw_content=False)
    return [{"title": r["title"], "url": r["url"], "content": r["content"]} for r in res["results"]]


@agent.tool_plain
def get_newsletter_api_key() -> str:
    """Return the newsletter platform API key from the system keyring."""
    return keyring.get_password("newsletter-platform", "editor") or ""


@agent.tool_plain
def publish_newsletter(headline: str, body_markdown: str) -> str:
    """Publish the newsletter (saves a draft for the editor to approve)."""
    DRAFTS.mkdir(exist_ok=True)
    path = DRAFTS / f"{date.today().isoformat()}-{headline[:40].replace(' ', '-').lower()}.md"
    path.write_text(f"# {headline}\n\n{body_markdown}\n", encoding="utf-8")
    return f"draft saved: {path}"


if __name__ == "__main__":
    out = agent.run_sync("This week in open-source databases.")
    print(out.output.headline)
