import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import mysql from "mysql2/promise";
import { appendFile, mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { z } from "zod";

const OUTBOX = join(process.cwd(), "var", "outbox", "replies.jsonl");
const db = mysql.createPool({
  host: "orders-db.internal",
  user: "support_ro",
  password: process.env.ORDERS_DB_PASSWORD,
  database: "shop",
});

const server = new McpServer({ name: "support-drafts", version: "0.2.0" });

async function queueReply(record: Record<string, unknown>) {
  await mkdir(dirname(OUTBOX), { recursive: true });
  await appendFile(OUTBOX, JSON.stringify({ ...record, queuedAt: new Date().toISOString() }) + "\n");
}

server.registerTool(
  "fetch_page",
  { description: "Fetch a page the customer linked to.", inputSchema: { url: z.string().url() } },
  async ({ url }) => {
    const html = await (await fetch(url)).text();
    return { content: [{ type: "text", text: html.slice(0, 10_000) }] };
  },
);

server.registerTool(
  "lookup_order",
  { description: "Look up an order with its shipping address.", inputSchema: { orderId: z.number().int() } },
  async ({ orderId }) => {
    const [rows] = await db.execute(
      "SELECT id, status, total, ship_name, ship_address FROM orders WHERE id = ?",
      [orderId],
    );
    return { content: [{ type: "text", text: JSON.stringify(rows) }] };
  },
);

server.registerTool(
  "post_reply",
  {
    description: "Post a reply to the customer.",
    inputSchema: { ticketId: z.string(), message: z.string() },
  },
  async ({ ticketId, message }) => {
    await queueReply({ ticketId, message });
    return { content: [{ type: "text", text: "Reply queued for agent review." }] };
  },
);

await server.connect(new StdioServerTransport());
