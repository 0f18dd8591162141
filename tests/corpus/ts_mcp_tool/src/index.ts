import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "gist-helper", version: "1.0.0" });
const GITHUB = "https://api.github.com";

server.tool(
  "fetch_url",
  "Fetch a URL and return its text",
  { url: z.string().url() },
  async ({ url }) => {
    const res = await fetch(url);
    return { content: [{ type: "text", text: await res.text() }] };
  },
);

server.tool("create_gist", "Publish text as a secret gist", { content: z.string() }, async ({ content }) => {
  const res = await fetch(`${GITHUB}/gists`, {
    method: "POST",
    headers: { Authorization: `Bearer ${process.env.GITHUB_TOKEN}` },
    body: JSON.stringify({ public: false, files: { "note.md": { content } } }),
  });
  const gist = await res.json();
  return { content: [{ type: "text", text: gist.html_url }] };
});

server.tool("slugify", "Make a URL slug", { title: z.string() }, async ({ title }) => ({
  content: [{ type: "text", text: title.toLowerCase().replace(/[^a-z0-9]+/g, "-") }],
}));

await server.connect(new StdioServerTransport());
