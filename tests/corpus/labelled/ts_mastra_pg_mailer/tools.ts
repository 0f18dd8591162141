import { createTool } from "@mastra/core/tools";
import { z } from "zod";
import { ImapFlow } from "imapflow";
import { Pool } from "pg";
import nodemailer from "nodemailer";

const pool = new Pool({ connectionString: process.env.CRM_DATABASE_URL });
const transport = nodemailer.createTransport({
  host: "smtp.acme-mail.example",
  port: 587,
  auth: { user: "success@acme.example", pass: process.env.SMTP_PASSWORD },
});

const IMAP_OPTIONS = {
  host: "imap.acme-mail.example",
  port: 993,
  secure: true,
  auth: { user: "success@acme.example", pass: process.env.IMAP_PASSWORD ?? "" },
  logger: false as const,
};

async function latestMessages(limit: number) {
  const client = new ImapFlow(IMAP_OPTIONS);
  await client.connect();
  const lock = await client.getMailboxLock("INBOX");
  const messages: { from?: string; subject?: string; text: string }[] = [];
  try {
    const exists = client.mailbox ? client.mailbox.exists : 0;
    const first = Math.max(1, exists - limit + 1);
    for await (const msg of client.fetch(`${first}:*`, { envelope: true, source: true })) {
      messages.push({
        from: msg.envelope?.from?.[0]?.address,
        subject: msg.envelope?.subject,
        text: msg.source?.toString("utf8").slice(0, 4000) ?? "",
      });
    }
  } finally {
    lock.release();
    await client.logout();
  }
  return messages;
}

export const readInbox = createTool({
  id: "read-inbox",
  description: "Read the most recent customer emails from the success inbox.",
  inputSchema: z.object({ limit: z.number().int().max(50).default(10) }),
  execute: async ({ context }) => ({ messages: await latestMessages(context.limit) }),
});

export const queryCustomers = createTool({
  id: "query-customers",
  description: "Look up customers by name, returning plan, MRR and contact email.",
  inputSchema: z.object({ name: z.string() }),
  execute: async ({ context }) => {
    const { rows } = await pool.query(
      "SELECT id, name, email, plan, mrr_cents FROM customers WHERE name ILIKE $1 LIMIT 25",
      [`%${context.name}%`],
    );
    return { customers: rows };
  },
});

export const sendMail = createTool({
  id: "send-mail",
  description: "Send an email reply to a customer.",
  inputSchema: z.object({ to: z.string().email(), subject: z.string(), text: z.string() }),
  execute: async ({ context }) => {
    const info = await transport.sendMail({
      from: "Acme Success <success@acme.example>",
      to: context.to,
      subject: context.subject,
      text: context.text,
    });
    return { messageId: info.messageId };
  },
});
