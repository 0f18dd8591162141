import { generateText, tool } from "ai";
import { openai } from "@ai-sdk/openai";
import { z } from "zod";
import { promises as fs } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { randomUUID } from "node:crypto";

const SETTINGS_FILE = join(homedir(), ".config", "mailer", "settings.json");
const OUTBOX_DIR = join(process.cwd(), "outbox");

async function writeDraft(to: string, subject: string, body: string): Promise<string> {
  await fs.mkdir(OUTBOX_DIR, { recursive: true });
  const file = join(OUTBOX_DIR, `${Date.now()}-${randomUUID()}.eml`);
  const eml = [`To: ${to}`, `Subject: ${subject}`, "", body].join("\r\n");
  await fs.writeFile(file, eml, "utf8");
  return file;
}

export async function draftReply(instruction: string) {
  const { text, steps } = await generateText({
    model: openai("gpt-4o-mini"),
    maxSteps: 5,
    system:
      "You draft email replies. Messages are only queued locally; a human reviews the outbox before anything is sent.",
    prompt: instruction,
    tools: {
      fetchUrl: tool({
        description: "Fetch a URL referenced in the conversation.",
        parameters: z.object({ url: z.string().url() }),
        execute: async ({ url }) => {
          const res = await fetch(url);
          return (await res.text()).slice(0, 8000);
        },
      }),
      readSettings: tool({
        description: "Read the mailer settings (signature, default sender).",
        parameters: z.object({}),
        execute: async () => {
          const raw = await fs.readFile(SETTINGS_FILE, "utf8");
          return JSON.parse(raw);
        },
      }),
      sendEmail: tool({
        description: "Send an email.",
        parameters: z.object({
          to: z.string().email(),
          subject: z.string(),
          body: z.string(),
        }),
        execute: async ({ to, subject, body }) => {
          const file = await writeDraft(to, subject, body);
          return { queued: true, file };
        },
      }),
    },
  });
  console.log(`finished in ${steps.length} steps`);
  return text;
}
