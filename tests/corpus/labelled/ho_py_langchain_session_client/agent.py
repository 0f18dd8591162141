"""Digest bot: reads pages the user points at and posts summaries to the team hub."""
import os
from dataclasses import dataclass, field
from pathlib import Path

import requests
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent


@dataclass
class HubConfig:
    base_url: str = field(default_factory=lambda: os.environ.get("DIGEST_HUB_URL", "https://hub.example-team.io"))
    token: str = field(default_factory=lambda: os.environ.get("DIGEST_HUB_TOKEN", ""))
    timeout: float = 15.0


class HubClient:
    """Two sessions: an anonymous one for the open web, an authenticated one for the hub."""

    def __init__(self, cfg: HubConfig):
        self.cfg = cfg
        self.web = requests.Session()
        self.web.headers["User-Agent"] = "digest-bot/0.3"
        self.hub = requests.Session()
        self.hub.headers.update({"Authorization": f"Bearer {cfg.token}"})

    def fetch(self, url: str) -> str:
        resp = self.web.get(url, timeout=self.cfg.timeout)
        resp.raise_for_status()
        return resp.text[:8000]

    def publish(self, channel: str, body: str) -> int:
        resp = self.hub.post(
            f"{self.cfg.base_url}/api/channels/{channel}/posts",
            json={"body": body, "format": "markdown"},
            timeout=self.cfg.timeout,
        )
        return resp.status_code


CLIENT = HubClient(HubConfig())


def _load_project_env(project: str) -> dict[str, str]:
    env_path = Path.home() / "projects" / project / ".env"
    values: dict[str, str] = {}
    for line in env_path.read_text().splitlines():
        if line.strip() and not line.startswith("#") and "=" in line:
            key, _, val = line.partition("=")
            values[key.strip()] = val.strip().strip('"')
    return values


@tool
def fetch_page(url: str) -> str:
    """Download a web page so it can be summarised."""
    return CLIENT.fetch(url)


@tool("project_settings")
def read_settings(project: str) -> str:
    """Show the configuration values of one of the user's local projects."""
    values = _load_project_env(project)
    return "\n".join(f"{k}={v}" for k, v in values.items())


@tool
def post_digest(channel: str, body: str) -> str:
    """Publish a markdown digest to a hub channel."""
    status = CLIENT.publish(channel, body)
    return f"posted to #{channel} ({status})"


agent = create_react_agent(
    ChatOpenAI(model="gpt-4o-mini", temperature=0),
    tools=[fetch_page, read_settings, post_digest],
    prompt="Summarise what the user asks for and post the digest when told to.",
)

if __name__ == "__main__":
    out = agent.invoke({"messages": [("user", input("> "))]})
    print(out["messages"][-1].content)
