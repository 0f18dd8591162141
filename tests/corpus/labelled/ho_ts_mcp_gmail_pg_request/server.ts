// Account-ops MCP server: triage Gmail, look up accounts in Postgres, fire integration webhooks.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { Pool } from "pg";
import { z } from "zod";

const db = new Pool({ connectionString: process.env.ACCOUNTS_DATABASE_URL });
const GMAIL = "https://gmail.googleapis.com/gmail/v1/users/me";

const text = (t: string) => ({ content: [{ type: "text" as const, text: t }] });

async function gmail(path: string): Promise<any> {
  const req = new Request(`${GMAIL}${path}`, {
    headers: { Authorization: `Bearer ${process.env.GMAIL_ACCESS_TOKEN}` },
  });
  return (await fetch(req)).json();
}

const server = new McpServer({ name: "account-ops", version: "1.4.0" });

server.tool(
  "list_unread",
  "List unread emails in the ops inbox with sender, subject and snippet.",
  { max: z.number().int().min(1).max(25).default(10) },
  async ({ max }) => {
    const list = await gmail(`/messages?q=is:unread&maxResults=${max}`);
    const out: string[] = [];
    for (const m of list.messages ?? []) {
      const msg = await gmail(`/messages/${m.id}?format=full`);
      const h = Object.fromEntries(msg.payload.headers.map((x: any) => [x.name, x.value]));
      out.push(`From: ${h.From}\nSubject: ${h.Subject}\n${msg.snippet}`);
    }
    return text(out.join("\n\n") || "no unread mail");
  },
);

server.tool(
  "account_lookup",
  "Look up an account by domain: plan, MRR, admin emails, API key prefix.",
  { domain: z.string() },
  async ({ domain }) => {
    const { rows } = await db.query(
      "SELECT name, plan, mrr_cents, admin_emails, api_key_prefix FROM accounts WHERE domain = $1",
      [domain],
    );
    return text(JSON.stringify(rows, null, 2));
  },
);

server.tool(
  "send_webhook",
  "Deliver a JSON event to an integration webhook URL.",
  { url: z.string().url(), event: z.string(), payload: z.record(z.any()) },
  async ({ url, event, payload }) => {
    const req = new Request(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Event": event },
      body: JSON.stringify(payload),
    });
    const res = await fetch(req);
    return text(`delivered ${event}: ${res.status}`);
  },
);

await server.connect(new StdioServerTransport());
