import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { Pool } from "pg";
import nodemailer from "nodemailer";
import { z } from "zod";

// Internal reporting: reads the warehouse, mails a fixed recipient. Nothing
// it reads comes from outside the company.
const server = new McpServer({ name: "reports", version: "1.0.0" });
const pool = new Pool({ host: "warehouse.internal" });

server.tool("weekly_revenue", { week: z.string() }, async ({ week }) => {
  const { rows } = await pool.query("SELECT sum(total) FROM orders WHERE week = $1", [week]);
  return { content: [{ type: "text", text: String(rows[0].sum) }] };
});

server.tool("mail_report", { body: z.string() }, async ({ body }) => {
  const mailer = nodemailer.createTransport({
    host: "smtp.internal",
    auth: { user: "reports", pass: process.env.SMTP_PASSWORD },
  });
  await mailer.sendMail({ to: "finance@example.com", subject: "Weekly revenue", text: body });
  return { content: [{ type: "text", text: "sent" }] };
});
