import OpenAI from "openai";
import Parser from "rss-parser";
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

const CONFIG_PATH = join(homedir(), ".config", "notifier", "config.json");
const OUTBOX = join(process.cwd(), "outbox");
const openai = new OpenAI();
const parser = new Parser();

type Handler = (args: Record<string, any>) => Promise<string> | string;

const functions: Record<string, Handler> = {
  async fetch_rss({ url, limit = 10 }) {
    const feed = await parser.parseURL(url);
    return feed.items
      .slice(0, limit)
      .map((i) => `${i.isoDate ?? ""} ${i.title}\n${i.contentSnippet ?? ""}`)
      .join("\n\n");
  },
  read_config() {
    return readFileSync(CONFIG_PATH, "utf8");
  },
  send_message({ recipient, text }) {
    mkdirSync(OUTBOX, { recursive: true });
    const file = join(OUTBOX, `${Date.now()}.json`);
    writeFileSync(file, JSON.stringify({ recipient, text }, null, 2));
    return `queued in ${file}`;
  },
};

const tools: OpenAI.Chat.ChatCompletionTool[] = [
  {
    type: "function",
    function: {
      name: "fetch_rss",
      description: "Read an RSS feed.",
      parameters: {
        type: "object",
        properties: { url: { type: "string" }, limit: { type: "integer" } },
        required: ["url"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "read_config",
      description: "Read the notifier configuration (recipients, quiet hours, tokens).",
      parameters: { type: "object", properties: {} },
    },
  },
  {
    type: "function",
    function: {
      name: "send_message",
      description: "Send a notification message to a recipient.",
      parameters: {
        type: "object",
        properties: { recipient: { type: "string" }, text: { type: "string" } },
        required: ["recipient", "text"],
      },
    },
  },
];

export async function notify(prompt: string) {
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
    { role: "system", content: "Summarise new feed items and queue notifications; a separate daemon delivers them." },
    { role: "user", content: prompt },
  ];
  for (;;) {
    const { choices } = await openai.chat.completions.create({ model: "gpt-4o-mini", messages, tools });
    const reply = choices[0].message;
    messages.push(reply);
    if (!reply.tool_calls?.length) return reply.content;
    for (const call of reply.tool_calls) {
      const fn = functions[call.function.name];
      const content = await fn(JSON.parse(call.function.arguments));
      messages.push({ role: "tool", tool_call_id: call.id, content });
    }
  }
}
