// Weekly digest tools: internal handbook RAG, public RSS, SMTP delivery.
import { openai } from "@ai-sdk/openai";
import { createTool } from "@mastra/core/tools";
import { PgVector } from "@mastra/pg";
import { embed } from "ai";
import nodemailer from "nodemailer";
import Parser from "rss-parser";
import { z } from "zod";

const vectors = new PgVector({ connectionString: process.env.HANDBOOK_PG_URL! });
const rss = new Parser({ timeout: 15_000 });
const mailer = nodemailer.createTransport({
  host: process.env.SMTP_HOST,
  port: 465,
  secure: true,
  auth: { user: process.env.SMTP_USER, pass: process.env.SMTP_PASS },
});

export const searchHandbook = createTool({
  id: "search-handbook",
  description: "Semantic search over the internal employee handbook and HR policies.",
  inputSchema: z.object({ question: z.string(), topK: z.number().int().default(5) }),
  execute: async ({ context }) => {
    const { embedding } = await embed({ model: openai.embedding("text-embedding-3-small"), value: context.question });
    const hits = await vectors.query({ indexName: "handbook", queryVector: embedding, topK: context.topK });
    return hits.map((h) => ({ score: h.score, text: h.metadata?.text, source: h.metadata?.path }));
  },
});

export const readFeed = createTool({
  id: "read-feed",
  description: "Read recent items from an industry news RSS feed.",
  inputSchema: z.object({ feedUrl: z.string().url(), limit: z.number().int().default(10) }),
  execute: async ({ context }) => {
    const feed = await rss.parseURL(context.feedUrl);
    return feed.items.slice(0, context.limit).map((i) => ({ title: i.title, link: i.link, text: i.contentSnippet }));
  },
});

export const emailDigest = createTool({
  id: "email-digest",
  description: "Email the finished digest to a list of recipients.",
  inputSchema: z.object({ to: z.array(z.string().email()), subject: z.string(), markdown: z.string() }),
  execute: async ({ context }) => {
    const info = await mailer.sendMail({
      from: "digest@acme.example",
      to: context.to.join(", "),
      subject: context.subject,
      text: context.markdown,
    });
    return { messageId: info.messageId };
  },
});
