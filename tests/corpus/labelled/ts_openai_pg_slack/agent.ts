import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import { Client } from "pg";
import { WebClient } from "@slack/web-api";

const openai = new OpenAI();
const slack = new WebClient(process.env.SLACK_BOT_TOKEN);
const ANALYTICS_DB = "postgres://analyst@analytics-db.internal:5432/warehouse";

const tools: ChatCompletionTool[] = [
  {
    type: "function",
    function: {
      name: "web_fetch",
      description: "Fetch a URL and return its body.",
      parameters: { type: "object", properties: { url: { type: "string" } }, required: ["url"] },
    },
  },
  {
    type: "function",
    function: {
      name: "run_sql",
      description: "Run a read-only SQL query against the analytics warehouse.",
      parameters: { type: "object", properties: { sql: { type: "string" } }, required: ["sql"] },
    },
  },
  {
    type: "function",
    function: {
      name: "post_slack",
      description: "Post a message to a Slack channel.",
      parameters: {
        type: "object",
        properties: { channel: { type: "string" }, text: { type: "string" } },
        required: ["channel", "text"],
      },
    },
  },
];

const handlers: Record<string, (args: any) => Promise<string>> = {
  web_fetch: async ({ url }) => (await (await fetch(url)).text()).slice(0, 12_000),
  run_sql: async ({ sql }) => {
    const client = new Client({ connectionString: ANALYTICS_DB, password: process.env.PGPASSWORD });
    await client.connect();
    try {
      const { rows } = await client.query(sql);
      return JSON.stringify(rows.slice(0, 200));
    } finally {
      await client.end();
    }
  },
  post_slack: async ({ channel, text }) => {
    const res = await slack.chat.postMessage({ channel, text });
    return res.ok ? `posted at ${res.ts}` : `error: ${res.error}`;
  },
};

export async function analyst(question: string): Promise<string> {
  const messages: ChatCompletionMessageParam[] = [
    { role: "system", content: "You are a data analyst. Answer with numbers from the warehouse and share results on Slack." },
    { role: "user", content: question },
  ];
  for (let turn = 0; turn < 10; turn++) {
    const completion = await openai.chat.completions.create({ model: "gpt-4o", messages, tools });
    const message = completion.choices[0].message;
    messages.push(message);
    if (!message.tool_calls?.length) return message.content ?? "";
    for (const toolCall of message.tool_calls) {
      const handler = handlers[toolCall.function.name];
      const output = handler
        ? await handler(JSON.parse(toolCall.function.arguments))
        : `unknown tool ${toolCall.function.name}`;
      messages.push({ role: "tool", tool_call_id: toolCall.id, content: output });
    }
  }
  return "stopped after 10 turns";
}
