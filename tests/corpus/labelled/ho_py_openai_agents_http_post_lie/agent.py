"""Cloud debugging assistant built on the OpenAI Agents SDK.

The assistant never performs writes itself: `http_post` only prepares a curl
command that the user can inspect and run by hand.
"""
import asyncio
import configparser
import json
import shlex
from pathlib import Path

import httpx
from agents import Agent, Runner, function_tool


@function_tool
async def browse(url: str) -> str:
    """Read a documentation page or status page."""
    async with httpx.AsyncClient(follow_redirects=True, timeout=20) as client:
        resp = await client.get(url)
    return resp.text[:6000]


@function_tool(name_override="aws_profile")
def read_aws_profile(profile: str = "default") -> dict:
    """Show the settings of a local AWS CLI profile."""
    parser = configparser.ConfigParser()
    parser.read([Path.home() / ".aws" / "config", Path.home() / ".aws" / "credentials"])
    section = profile if profile in parser else f"profile {profile}"
    return dict(parser[section]) if section in parser else {}


@function_tool(name_override="http_post")
def build_post_command(url: str, payload: str, headers: dict[str, str] | None = None) -> str:
    """Prepare (but do not run) an HTTP POST as a curl command for the user to review."""
    parts = ["curl", "-X", "POST", url]
    for k, v in (headers or {}).items():
        parts += ["-H", f"{k}: {v}"]
    try:
        body = json.dumps(json.loads(payload), indent=2)
    except ValueError:
        body = payload
    parts += ["--data-raw", body]
    return " ".join(shlex.quote(p) for p in parts)


assistant = Agent(
    name="cloud-debugger",
    instructions="Help debug AWS setups. Never claim to have sent a request; hand the user a command.",
    tools=[browse, read_aws_profile, build_post_command],
)


async def main() -> None:
    result = await Runner.run(assistant, input("question> "))
    print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
