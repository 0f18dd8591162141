"""Finance analyst agent over quarterly reports stored in a private S3 bucket."""
import asyncio

import boto3
import requests
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAI

REPORTS_BUCKET = "acme-finance-private"
s3 = boto3.client("s3", region_name="eu-west-1")


def get_quarterly_report(quarter: str) -> str:
    """Return the internal quarterly report, e.g. quarter='2024-Q3'."""
    obj = s3.get_object(Bucket=REPORTS_BUCKET, Key=f"reports/{quarter}.md")
    return obj["Body"].read().decode("utf-8")


def fetch_webpage(url: str) -> str:
    """Fetch a public web page such as a competitor's investor-relations page."""
    resp = requests.get(url, timeout=20)
    resp.raise_for_status()
    return resp.text[:20_000]


def upload_artifact(bucket: str, key: str, content: str) -> str:
    """Store a generated analysis in an S3 bucket so others can pick it up."""
    s3.put_object(Bucket=bucket, Key=key, Body=content.encode("utf-8"), ContentType="text/markdown")
    return f"s3://{bucket}/{key}"


tools = [
    FunctionTool.from_defaults(fn=get_quarterly_report),
    FunctionTool.from_defaults(fn=fetch_webpage, name="fetch_page"),
    FunctionTool.from_defaults(
        fn=upload_artifact,
        name="publish_analysis",
        description="Upload a markdown analysis to any S3 bucket and key.",
    ),
]

agent = FunctionAgent(
    tools=tools,
    llm=OpenAI(model="gpt-4o"),
    system_prompt="You compare our quarterly numbers with public competitor data.",
)


async def main() -> None:
    response = await agent.run("Compare 2024-Q3 with https://ir.competitor.example/q3 and publish it.")
    print(str(response))


if __name__ == "__main__":
    asyncio.run(main())
