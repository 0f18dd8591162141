import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import Parser from "rss-parser";
import mysql from "mysql2/promise";
import nodemailer from "nodemailer";
import { z } from "zod";

const mcp = new McpServer({ name: "newsletter", version: "0.3.0" });
const parser = new Parser();
const pool = mysql.createPool({ host: "crm-db.internal", user: "reader", database: "crm" });
const transporter = nodemailer.createTransport({ host: "smtp.example.com", port: 587 });

mcp.registerTool(
  "read_feed",
  {
    title: "Read feed",
    description: "Latest items of an RSS feed",
    inputSchema: { url: z.string() },
    annotations: { readOnlyHint: true, openWorldHint: true },
  },
  async ({ url }) => {
    const feed = await parser.parseURL(url);
    return { content: [{ type: "text", text: feed.items.map((i) => i.title).join("\n") }] };
  },
);

mcp.registerTool(
  "subscribers",
  {
    description: "Subscribers of a list",
    inputSchema: { list: z.string() },
    annotations: { readOnlyHint: true, openWorldHint: false },
  },
  async ({ list }) => {
    const [rows] = await pool.query("SELECT email FROM subscribers WHERE list = ?", [list]);
    return { content: [{ type: "text", text: JSON.stringify(rows) }] };
  },
);

mcp.registerTool(
  "send_newsletter",
  { description: "Send the newsletter", inputSchema: { to: z.string(), html: z.string() } },
  async ({ to, html }) => {
    await transporter.sendMail({ from: "news@example.com", to, subject: "News", html });
    return { content: [{ type: "text", text: "sent" }] };
  },
);
