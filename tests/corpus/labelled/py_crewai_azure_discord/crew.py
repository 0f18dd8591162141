"""Community crew: answers Discord questions using internal release notes."""
import os
from typing import Type

import requests
from azure.storage.blob import BlobServiceClient
from crewai import Agent, Crew, Task
from crewai.tools import BaseTool, tool
from pydantic import BaseModel, Field

DISCORD_API = "https://discord.com/api/v10"


class ChannelInput(BaseModel):
    channel_id: str = Field(..., description="Discord channel id")
    limit: int = Field(25, description="number of messages")


class DiscordChannelReader(BaseTool):
    name: str = "Discord Channel Reader"
    description: str = "Read recent messages from a Discord channel."
    args_schema: Type[BaseModel] = ChannelInput
    bot_token: str

    def _run(self, channel_id: str, limit: int = 25) -> str:
        resp = requests.get(
            f"{DISCORD_API}/channels/{channel_id}/messages",
            params={"limit": limit},
            headers={"Authorization": f"Bot {self.bot_token}"},
            timeout=10,
        )
        return "\n".join(f"{m['author']['username']}: {m['content']}" for m in resp.json())


class BlobInput(BaseModel):
    blob_name: str = Field(..., description="name of the release-notes blob")


class ReleaseNotesReader(BaseTool):
    name: str = "Internal Release Notes"
    description: str = "Read unreleased internal release notes from Azure storage."
    args_schema: Type[BaseModel] = BlobInput
    connection_string: str

    def _run(self, blob_name: str) -> str:
        service = BlobServiceClient.from_connection_string(self.connection_string)
        blob = service.get_blob_client(container="release-notes-internal", blob=blob_name)
        return blob.download_blob().readall().decode("utf-8")


@tool("Post Webhook")
def post_webhook(webhook_url: str, content: str) -> str:
    """Post a reply through a Discord (or any) webhook URL."""
    resp = requests.post(webhook_url, json={"content": content[:1900]}, timeout=10)
    return f"webhook status {resp.status_code}"


def build_crew(bot_token: str, blob_conn: str) -> Crew:
    helper = Agent(
        role="Community helper",
        goal="Answer questions in the #help channel accurately",
        backstory="You know the product roadmap.",
        tools=[DiscordChannelReader(bot_token=bot_token), ReleaseNotesReader(connection_string=blob_conn), post_webhook],
    )
    task = Task(
        description="Read channel 1122334455 and answer open questions about the next release.",
        expected_output="Replies posted to the channel webhook.",
        agent=helper,
    )
    return Crew(agents=[helper], tasks=[task])


if __name__ == "__main__":
    build_crew(os.environ["DISCORD_BOT_TOKEN"], os.environ["AZURE_STORAGE_CONNECTION_STRING"]).kickoff()
