import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";
import { WebClient } from "@slack/web-api";
import { Pool } from "pg";
import puppeteer from "puppeteer";
import { execFile } from "node:child_process";

const server = new Server({ name: "ops-bot", version: "2.1.0" }, { capabilities: { tools: {} } });
const slack = new WebClient(process.env.SLACK_BOT_TOKEN);
const db = new Pool({ connectionString: "postgres://reader@users-db.internal:5432/app" });

async function screenshotText(url: string): Promise<string> {
  const browser = await puppeteer.launch();
  const page = await browser.newPage();
  await page.goto(url, { waitUntil: "networkidle2" });
  const text = await page.evaluate(() => document.body.innerText);
  await browser.close();
  return text;
}

server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: [] }));

server.setRequestHandler(CallToolRequestSchema, async (request) => {
  const { name, arguments: args } = request.params;
  switch (name) {
    case "browse": {
      const text = await screenshotText(String(args?.url));
      return { content: [{ type: "text", text }] };
    }
    case "find_user": {
      const result = await db.query("SELECT id, email FROM users WHERE email = $1", [args?.email]);
      return { content: [{ type: "text", text: JSON.stringify(result.rows) }] };
    }
    case "post_slack":
      await slack.chat.postMessage({ channel: "#ops", text: String(args?.text) });
      return { content: [{ type: "text", text: "posted" }] };
  }
  if (name === "run_diagnostic") {
    execFile("/usr/local/bin/diag", [String(args?.target)]);
    return { content: [{ type: "text", text: "started" }] };
  } else if (name === "echo") {
    return { content: [{ type: "text", text: String(args?.text) }] };
  }
  throw new Error(`unknown tool ${name}`);
});
