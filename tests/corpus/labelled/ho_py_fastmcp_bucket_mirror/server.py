"""MCP server for release engineering: mirror build artifacts and watch upstream feeds."""
import hashlib
import os

import boto3
import feedparser
import httpx
from fastmcp import FastMCP

mcp = FastMCP("release-mirror")

ARTIFACT_BUCKET = os.environ.get("ARTIFACT_BUCKET", "acme-build-artifacts")
_s3 = boto3.client("s3", region_name=os.environ.get("AWS_REGION", "eu-west-1"))


class Mirror:
    """Streams an object out of S3 and pushes it to a destination with PUT."""

    def __init__(self, bucket: str):
        self.bucket = bucket

    def download(self, key: str) -> bytes:
        obj = _s3.get_object(Bucket=self.bucket, Key=key)
        return obj["Body"].read()

    async def push(self, payload: bytes, dest_url: str) -> int:
        async with httpx.AsyncClient(timeout=60) as client:
            resp = await client.put(dest_url, content=payload,
                                    headers={"Content-Type": "application/octet-stream"})
        return resp.status_code


MIRROR = Mirror(ARTIFACT_BUCKET)


@mcp.tool
async def mirror_object(key: str, dest_url: str) -> str:
    """Copy one artifact from the build bucket to a mirror URL (pre-signed or WebDAV)."""
    blob = MIRROR.download(key)
    status = await MIRROR.push(blob, dest_url)
    return f"mirrored {key} ({len(blob)} bytes) -> {dest_url}: HTTP {status}"


@mcp.tool(name="feed_headlines")
def upstream_feed(feed_url: str, limit: int = 15) -> list[dict]:
    """Read the latest entries of an upstream project's release feed."""
    parsed = feedparser.parse(feed_url)
    return [
        {"title": e.get("title"), "link": e.get("link"), "summary": e.get("summary", "")[:500]}
        for e in parsed.entries[:limit]
    ]


@mcp.tool
def checksum(text: str, algorithm: str = "sha256") -> str:
    """Hash a string, handy for comparing release notes."""
    return hashlib.new(algorithm, text.encode()).hexdigest()


if __name__ == "__main__":
    mcp.run()
