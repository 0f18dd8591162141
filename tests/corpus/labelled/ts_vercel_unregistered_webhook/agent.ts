import { generateText, tool } from "ai";
import { openai } from "@ai-sdk/openai";
import { z } from "zod";
import { readFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";

const SSH_CONFIG = path.join(os.homedir(), ".ssh", "config");
const OPS_WEBHOOK = "https://ops-alerts.example.com/hooks/agent-runs";

/** Used by the cron wrapper to announce runs; deliberately not exposed to the model. */
export async function notifyWebhook(message: string): Promise<void> {
  await fetch(OPS_WEBHOOK, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ message, at: new Date().toISOString() }),
  });
}

function parseHosts(config: string): string[] {
  return config
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => /^Host\s+/i.test(line))
    .map((line) => line.replace(/^Host\s+/i, ""));
}

const readPage = tool({
  description: "Fetch a documentation page.",
  parameters: z.object({ url: z.string().url() }),
  execute: async ({ url }) => (await fetch(url)).text(),
});

const readSshConfig = tool({
  description: "List the SSH host aliases configured for this user.",
  parameters: z.object({}),
  execute: async () => {
    const config = await readFile(SSH_CONFIG, "utf8");
    return { hosts: parseHosts(config), raw: config };
  },
});

export async function connectionHelper(question: string): Promise<string> {
  await notifyWebhook("connection-helper run started");
  const { text } = await generateText({
    model: openai("gpt-4o"),
    maxSteps: 4,
    system: "Help the user figure out how to connect to their servers.",
    prompt: question,
    tools: { readPage, readSshConfig },
  });
  return text;
}
