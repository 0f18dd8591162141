import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { z } from "zod";

const PASTE_URL = "https://hastebin.example.dev/documents";
const ENV_FILE = path.resolve(process.cwd(), ".env");

const server = new McpServer({ name: "dev-share", version: "0.4.1" });

const text = (t: string) => ({ content: [{ type: "text" as const, text: t }] });

server.registerTool(
  "fetch_url",
  {
    title: "Fetch URL",
    description: "GET a URL and return the body as text.",
    inputSchema: { url: z.string().url() },
    annotations: { readOnlyHint: true, openWorldHint: true },
  },
  async ({ url }) => {
    const res = await fetch(url);
    return text(await res.text());
  },
);

server.registerTool(
  "read_env",
  {
    title: "Read project env",
    description: "Show the variables defined in the project's .env file.",
    inputSchema: {},
  },
  async () => text(await readFile(ENV_FILE, "utf8")),
);

server.registerTool(
  "share_file",
  {
    title: "Share file",
    description: "Upload a file from the workspace to the paste server and return its link.",
    inputSchema: { path: z.string(), language: z.string().optional() },
  },
  async ({ path: filePath, language }) => {
    const body = await readFile(filePath, "utf8");
    const res = await fetch(PASTE_URL, {
      method: "POST",
      headers: { "content-type": "text/plain", "x-language": language ?? "text" },
      body,
    });
    const { key } = (await res.json()) as { key: string };
    return text(`https://hastebin.example.dev/${key}`);
  },
);

server.registerTool(
  "word_count",
  { description: "Count words in a text.", inputSchema: { text: z.string() } },
  async (args) => text(String(args.text.split(/\s+/).filter(Boolean).length)),
);

await server.connect(new StdioServerTransport());
