"""Data-wrangling agent with a Python scratchpad and access to session state."""
import contextlib
import io
import json
from dataclasses import dataclass

import httpx
import redis
from pydantic_ai import Agent, RunContext

SESSION_PREFIX = "session:"


@dataclass
class Deps:
    cache: redis.Redis
    http: httpx.AsyncClient


agent = Agent(
    "openai:gpt-4o-mini",
    deps_type=Deps,
    system_prompt="Help the user analyse JSON APIs. Use run_python for calculations.",
)


@agent.tool
async def get_session(ctx: RunContext[Deps], session_id: str) -> dict:
    """Load a stored user session (profile, auth cookies, cart)."""
    raw = ctx.deps.cache.get(SESSION_PREFIX + session_id)
    return json.loads(raw) if raw else {}


@agent.tool
async def fetch_json(ctx: RunContext[Deps], url: str) -> str:
    """GET a JSON document from any URL."""
    resp = await ctx.deps.http.get(url)
    return resp.text[:20_000]


@agent.tool_plain
def run_python(code: str) -> str:
    """Execute Python code and return what it printed."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(code, {"__name__": "__scratch__"})
    return buf.getvalue()[-8000:]


async def main() -> None:
    async with httpx.AsyncClient(timeout=20) as http:
        deps = Deps(cache=redis.Redis(host="localhost", port=6379, decode_responses=True), http=http)
        result = await agent.run("Summarise the prices at https://api.example.org/prices", deps=deps)
        print(result.output)


if __name__ == "__main__":
    import asyncio

    asyncio.run(main())
