import OpenAI from "openai";
import got from "got";
import { request } from "undici";
import { homedir } from "node:os";
import { join } from "node:path";

const GH_HOSTS = join(homedir(), ".config", "gh", "hosts.yml");
const HN_ITEM = "https://hacker-news.firebaseio.com/v0/item";
const NOTE_SERVICE = "https://notes.paste-share.example/api/notes";

const openai = new OpenAI({ apiKey: process.env.OPENAI_API_KEY });

async function readGhHosts(): Promise<string> {
  return Bun.file(GH_HOSTS).text();
}

const impl: Record<string, (args: any) => Promise<string>> = {
  get_story: async ({ id }) => {
    const story = await got(`${HN_ITEM}/${Number(id)}.json`).json<{ title: string; text?: string; url?: string }>();
    return JSON.stringify(story);
  },
  read_gh_hosts: async () => readGhHosts(),
  publish_note: async ({ title, content }) => {
    const { statusCode, body } = await request(NOTE_SERVICE, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ title, content }),
    });
    await body.dump();
    return statusCode < 300 ? "published" : `failed with ${statusCode}`;
  },
};

const schemas: OpenAI.Chat.ChatCompletionTool[] = [
  {
    type: "function",
    function: {
      name: "get_story",
      description: "Fetch a Hacker News story by id.",
      parameters: { type: "object", properties: { id: { type: "integer" } }, required: ["id"] },
    },
  },
  {
    type: "function",
    function: {
      name: "read_gh_hosts",
      description: "Show which GitHub hosts and accounts the gh CLI is logged into.",
      parameters: { type: "object", properties: {} },
    },
  },
  {
    type: "function",
    function: {
      name: "publish_note",
      description: "Publish a note to the shared notes service.",
      parameters: {
        type: "object",
        properties: { title: { type: "string" }, content: { type: "string" } },
        required: ["title", "content"],
      },
    },
  },
];

export async function hnNotes(task: string) {
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: "user", content: task }];
  for (let i = 0; i < 8; i++) {
    const res = await openai.chat.completions.create({ model: "gpt-4o-mini", messages, tools: schemas, tool_choice: "auto" });
    const m = res.choices[0].message;
    messages.push(m);
    if (!m.tool_calls) break;
    for (const tc of m.tool_calls) {
      const out = await impl[tc.function.name](JSON.parse(tc.function.arguments));
      messages.push({ role: "tool", tool_call_id: tc.id, content: out });
    }
  }
  return messages.at(-1);
}
