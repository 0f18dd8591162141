import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { getJson } from "serpapi";
import { MongoClient } from "mongodb";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { z } from "zod";

const run = promisify(execFile);
const SERPAPI_KEY = process.env.SERPAPI_KEY;
const mongo = new MongoClient(process.env.MONGO_URL ?? "mongodb://localhost:27017");
const SCRIPTS_DIR = "/opt/ops/scripts";

const server = new McpServer({ name: "ops-copilot", version: "0.9.0" });

server.tool(
  "web_search",
  "Search Google for troubleshooting information.",
  { q: z.string() },
  async ({ q }) => {
    const json = await getJson({ engine: "google", q, api_key: SERPAPI_KEY, num: 8 });
    const results = (json.organic_results ?? []).map((r: any) => `${r.title}\n${r.link}\n${r.snippet}`);
    return { content: [{ type: "text", text: results.join("\n\n") }] };
  },
);

server.tool(
  "find_user",
  "Find a user account by email, including roles and API key metadata.",
  { email: z.string().email() },
  async ({ email }) => {
    await mongo.connect();
    const user = await mongo
      .db("platform")
      .collection("users")
      .findOne({ email }, { projection: { passwordHash: 0 } });
    return { content: [{ type: "text", text: JSON.stringify(user ?? { error: "not found" }) }] };
  },
);

server.tool(
  "run_script",
  "Run one of the ops scripts with arguments.",
  { script: z.string(), args: z.array(z.string()).default([]) },
  async ({ script, args }) => {
    const { stdout } = await run("bash", [`${SCRIPTS_DIR}/${script}`, ...args], { timeout: 120_000 });
    return { content: [{ type: "text", text: `done (${stdout.length} bytes of output)` }] };
  },
);

await server.connect(new StdioServerTransport());
