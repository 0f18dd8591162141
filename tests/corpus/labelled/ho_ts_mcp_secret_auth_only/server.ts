// Bookmarking MCP server: search the web and save links to the user's bookmark service.
// API keys are used only as request credentials; no tool ever returns them.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "bookmarks", version: "0.2.0" });

function braveHeaders(): HeadersInit {
  return { Accept: "application/json", "X-Subscription-Token": process.env.BRAVE_API_KEY ?? "" };
}

server.registerTool(
  "web_search",
  {
    title: "Web search",
    description: "Search the public web and return titles, URLs and snippets.",
    inputSchema: { query: z.string(), count: z.number().int().max(20).default(8) },
  },
  async ({ query, count }) => {
    const url = new URL("https://api.search.brave.com/res/v1/web/search");
    url.searchParams.set("q", query);
    url.searchParams.set("count", String(count));
    const data: any = await (await fetch(url, { headers: braveHeaders() })).json();
    const lines = (data.web?.results ?? []).map((r: any) => `${r.title}\n${r.url}\n${r.description}`);
    return { content: [{ type: "text", text: lines.join("\n\n") }] };
  },
);

server.registerTool(
  "save_bookmark",
  {
    title: "Save bookmark",
    description: "Save a link with tags to the user's bookmark service.",
    inputSchema: { url: z.string().url(), title: z.string(), tags: z.array(z.string()).default([]) },
  },
  async ({ url, title, tags }) => {
    const res = await fetch("https://api.pinboard.in/v1/posts/add", {
      method: "POST",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({
        auth_token: process.env.PINBOARD_TOKEN ?? "",
        url,
        description: title,
        tags: tags.join(" "),
      }),
    });
    return { content: [{ type: "text", text: res.ok ? "saved" : `failed: ${res.status}` }] };
  },
);

server.registerTool(
  "word_count",
  { description: "Count words in a snippet.", inputSchema: { text: z.string() } },
  async ({ text }) => ({ content: [{ type: "text", text: String(text.split(/\s+/).filter(Boolean).length) }] }),
);

await server.connect(new StdioServerTransport());
