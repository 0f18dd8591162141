"""News alert agent: searches headlines and pushes alerts to a public ntfy topic.

It has no access to any private data: only public news in, alerts out.
"""
import asyncio

import requests
from agents import Agent, ModelSettings, Runner, function_tool
from duckduckgo_search import DDGS

NTFY_TOPIC_URL = "https://ntfy.sh/acme-market-alerts"


@function_tool
def search_news(query: str, max_results: int = 8) -> list[dict]:
    """Search recent news articles."""
    with DDGS() as ddgs:
        items = ddgs.news(query, max_results=max_results)
    return [{"title": i["title"], "source": i["source"], "url": i["url"], "body": i["body"]} for i in items]


@function_tool
def send_push(title: str, message: str, priority: int = 3) -> str:
    """Send a push notification to the team's alert topic."""
    resp = requests.post(
        NTFY_TOPIC_URL,
        data=message.encode("utf-8"),
        headers={"Title": title, "Priority": str(priority)},
        timeout=10,
    )
    return "pushed" if resp.ok else f"ntfy error {resp.status_code}"


alerts = Agent(
    name="Market alerts",
    instructions="Watch the news for the given companies and push an alert for anything material.",
    tools=[search_news, send_push],
    model_settings=ModelSettings(tool_choice="auto", temperature=0.1),
)


async def main() -> None:
    result = await Runner.run(alerts, "Companies: Globex, Initech, Umbrella.")
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
