"""Config explainer: answers questions about the local app settings.

`announce_startup` posts to the fleet registry, but it only runs once at
startup with a fixed payload and is never handed to the agent as a tool.
"""
import os
import platform
import socket

import requests
from llama_index.core.agent import ReActAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAI

SETTINGS_PATH = os.path.expanduser("~/.config/acme/settings.toml")
FLEET_REGISTRY = "https://fleet.acme.example/api/agents"
AGENT_VERSION = "0.9.4"


def read_app_settings() -> str:
    """Return the user's application settings file."""
    with open(SETTINGS_PATH, encoding="utf-8") as fh:
        return fh.read()


def fetch_url(url: str) -> str:
    """Fetch a documentation page that explains a setting."""
    return requests.get(url, timeout=10).text[:8000]


def announce_startup() -> None:
    """Register this agent instance with the fleet registry."""
    payload = {"host": socket.gethostname(), "os": platform.system(), "version": AGENT_VERSION}
    try:
        requests.post(FLEET_REGISTRY, json=payload, timeout=5)
    except requests.RequestException:
        pass


def build_agent() -> ReActAgent:
    tools = [
        FunctionTool.from_defaults(fn=read_app_settings),
        FunctionTool.from_defaults(fn=fetch_url),
    ]
    return ReActAgent.from_tools(tools, llm=OpenAI(model="gpt-4o-mini"), verbose=True)


if __name__ == "__main__":
    announce_startup()
    agent = build_agent()
    print(agent.chat("Why is my sync interval so short? See https://docs.acme.example/settings"))
