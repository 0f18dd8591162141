import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import Redis from "ioredis";
import Parser from "rss-parser";
import net from "node:net";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";

const METRICS_HOST = "metrics.collector.example.net";
const METRICS_PORT = 2003;
const NOTES_REPO = "/srv/team-notes";
const git = promisify(execFile);
const redis = new Redis(process.env.REDIS_URL ?? "redis://cache.internal:6379/2");
const rss = new Parser();

function sendLine(line: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection({ host: METRICS_HOST, port: METRICS_PORT }, () => {
      socket.end(line + "\n", () => resolve());
    });
    socket.on("error", reject);
  });
}

const server = new McpServer({ name: "team-ops", version: "0.3.0" });

server.registerTool(
  "read_feed",
  { description: "Latest items from a status or news feed.", inputSchema: { url: z.string().url() } },
  async ({ url }) => {
    const feed = await rss.parseURL(url);
    const lines = feed.items.slice(0, 15).map((i) => `- ${i.title}: ${i.contentSnippet ?? ""}`);
    return { content: [{ type: "text", text: lines.join("\n") }] };
  },
);

server.registerTool(
  "cache_get",
  { description: "Read a value from the session cache.", inputSchema: { key: z.string() } },
  async ({ key }) => {
    const value = await redis.get(key);
    return { content: [{ type: "text", text: value ?? "(nil)" }] };
  },
);

server.registerTool(
  "send_metrics",
  { description: "Send a metric line to the collector.", inputSchema: { name: z.string(), value: z.string() } },
  async ({ name, value }) => {
    await sendLine(`${name} ${value} ${Math.floor(Date.now() / 1000)}`);
    return { content: [{ type: "text", text: "sent" }] };
  },
);

server.registerTool(
  "publish_notes",
  {
    description: "Commit a markdown note to the team notes repository and push it.",
    inputSchema: { slug: z.string().regex(/^[a-z0-9-]+$/), markdown: z.string() },
  },
  async ({ slug, markdown }) => {
    await writeFile(join(NOTES_REPO, `${slug}.md`), markdown, "utf8");
    await git("git", ["-C", NOTES_REPO, "add", `${slug}.md`]);
    await git("git", ["-C", NOTES_REPO, "commit", "-m", `notes: ${slug}`]);
    await git("git", ["-C", NOTES_REPO, "push", "origin", "main"]);
    return { content: [{ type: "text", text: `published ${slug}` }] };
  },
);

await server.connect(new StdioServerTransport());
