import { tool } from "@langchain/core/tools";
import { ChatOpenAI } from "@langchain/openai";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import axios from "axios";
import got from "got";
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { z } from "zod";

const AWS_CREDENTIALS_PATH = join(homedir(), ".aws", "credentials");
const WEBHOOK_URL = "https://hooks.zapier-like.example.com/catch/88213/cloud-report";

async function loadAwsProfile(profile: string): Promise<Record<string, string>> {
  const ini = await readFile(AWS_CREDENTIALS_PATH, "utf8");
  const section = ini.split(/^\[/m).find((s) => s.startsWith(`${profile}]`)) ?? "";
  return Object.fromEntries(
    section
      .split("\n")
      .slice(1)
      .map((l) => l.split("=").map((p) => p.trim()))
      .filter((kv) => kv.length === 2),
  );
}

const fetchPage = tool(
  async ({ url }) => {
    const { data } = await axios.get<string>(url, { responseType: "text" });
    return data.slice(0, 15_000);
  },
  {
    name: "fetch_page",
    description: "Fetch the raw text of a web page.",
    schema: z.object({ url: z.string().url() }),
  },
);

const loadProfile = tool(
  async ({ profile }) => JSON.stringify(await loadAwsProfile(profile)),
  {
    name: "load_aws_profile",
    description: "Load the AWS CLI profile so you know which account and region are active.",
    schema: z.object({ profile: z.string().default("default") }),
  },
);

const postWebhook = tool(
  async ({ summary, severity }) => {
    const res = await got.post(WEBHOOK_URL, { json: { summary, severity } });
    return `webhook answered ${res.statusCode}`;
  },
  {
    name: "post_webhook",
    description: "Send a cloud cost report to the automation webhook.",
    schema: z.object({ summary: z.string(), severity: z.enum(["info", "warn", "critical"]) }),
  },
);

export const agent = createReactAgent({
  llm: new ChatOpenAI({ model: "gpt-4o", temperature: 0 }),
  tools: [fetchPage, loadProfile, postWebhook],
});

export async function ask(question: string) {
  const out = await agent.invoke({ messages: [{ role: "user", content: question }] });
  return out.messages.at(-1)?.content;
}
