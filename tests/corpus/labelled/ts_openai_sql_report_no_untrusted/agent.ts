import OpenAI from "openai";
import { Pool } from "pg";
import nodemailer from "nodemailer";

const client = new OpenAI();
const pool = new Pool({
  host: "billing-db.internal",
  database: "billing",
  user: "reporting",
  password: process.env.BILLING_DB_PASSWORD,
});
const mailer = nodemailer.createTransport({ host: "smtp.internal.acme.example", port: 25 });
const OPS_LIST = "finance-ops@acme.example";

async function runQuery({ sql }: { sql: string }): Promise<string> {
  if (!/^\s*select\b/i.test(sql)) return "only SELECT statements are allowed";
  const { rows } = await pool.query(sql);
  return JSON.stringify(rows.slice(0, 500));
}

async function formatTable({ rows }: { rows: Record<string, unknown>[] }): Promise<string> {
  if (!rows.length) return "(no rows)";
  const cols = Object.keys(rows[0]);
  return [cols.join(" | "), cols.map(() => "---").join(" | "), ...rows.map((r) => cols.map((c) => String(r[c])).join(" | "))].join("\n");
}

async function sendReport({ subject, markdown }: { subject: string; markdown: string }): Promise<string> {
  const info = await mailer.sendMail({ from: "reports@acme.example", to: OPS_LIST, subject, text: markdown });
  return `sent ${info.messageId}`;
}

const registry: Record<string, (a: any) => Promise<string>> = {
  run_query: runQuery,
  format_table: formatTable,
  send_report: sendReport,
};

const tools: OpenAI.Chat.ChatCompletionTool[] = [
  { type: "function", function: { name: "run_query", description: "Run a SELECT on the billing database.", parameters: { type: "object", properties: { sql: { type: "string" } }, required: ["sql"] } } },
  { type: "function", function: { name: "format_table", description: "Render rows as a markdown table.", parameters: { type: "object", properties: { rows: { type: "array", items: { type: "object" } } }, required: ["rows"] } } },
  { type: "function", function: { name: "send_report", description: "Email the finished report to finance ops.", parameters: { type: "object", properties: { subject: { type: "string" }, markdown: { type: "string" } }, required: ["subject", "markdown"] } } },
];

export async function monthlyBillingReport(month: string) {
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
    { role: "system", content: "Build the monthly billing report from the database and email it to finance ops." },
    { role: "user", content: `Prepare the report for ${month}.` },
  ];
  let response = await client.chat.completions.create({ model: "gpt-4o", messages, tools });
  while (response.choices[0].message.tool_calls?.length) {
    const msg = response.choices[0].message;
    messages.push(msg);
    for (const toolCall of msg.tool_calls!) {
      const args = JSON.parse(toolCall.function.arguments);
      messages.push({ role: "tool", tool_call_id: toolCall.id, content: await registry[toolCall.function.name](args) });
    }
    response = await client.chat.completions.create({ model: "gpt-4o", messages, tools });
  }
  return response.choices[0].message.content;
}
