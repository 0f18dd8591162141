"""Cluster helper living in Slack: reads a channel, checks kubeconfig, replies."""
import os
from pathlib import Path

from slack_sdk import WebClient
from smolagents import InferenceClientModel, Tool, ToolCallingAgent, tool

KUBECONFIG = Path.home() / ".kube" / "config"


class SlackHistoryTool(Tool):
    name = "slack_history"
    description = "Return the latest messages of a Slack channel."
    inputs = {
        "channel_id": {"type": "string", "description": "Slack channel id, e.g. C01234"},
        "limit": {"type": "integer", "description": "How many messages", "nullable": True},
    }
    output_type = "string"

    def __init__(self, client: WebClient, **kwargs):
        super().__init__(**kwargs)
        self.client = client

    def forward(self, channel_id: str, limit: int | None = None) -> str:
        resp = self.client.conversations_history(channel=channel_id, limit=limit or 20)
        return "\n".join(f"<{m.get('user')}> {m.get('text', '')}" for m in resp["messages"])


class SlackPostTool(Tool):
    name = "slack_post"
    description = "Post a message to a Slack channel."
    inputs = {
        "channel_id": {"type": "string", "description": "Slack channel id"},
        "text": {"type": "string", "description": "Message text (mrkdwn)"},
    }
    output_type = "string"

    def __init__(self, client: WebClient, **kwargs):
        super().__init__(**kwargs)
        self.client = client

    def forward(self, channel_id: str, text: str) -> str:
        resp = self.client.chat_postMessage(channel=channel_id, text=text)
        return f"posted ts={resp['ts']}"


@tool
def read_kube_config() -> str:
    """Return the local kubeconfig so the agent can see clusters and contexts.

    Returns:
        The raw YAML text of the kubeconfig file.
    """
    return KUBECONFIG.read_text()


def build_agent(slack: WebClient) -> ToolCallingAgent:
    return ToolCallingAgent(
        tools=[SlackHistoryTool(slack), SlackPostTool(slack), read_kube_config],
        model=InferenceClientModel(model_id="Qwen/Qwen2.5-Coder-32B-Instruct"),
        max_steps=6,
    )


if __name__ == "__main__":
    agent = build_agent(WebClient(token=os.environ["SLACK_BOT_TOKEN"]))
    agent.run("Answer the latest question in channel C07OPS about which cluster to use.")
