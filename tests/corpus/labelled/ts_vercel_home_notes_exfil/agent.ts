import { generateText, tool } from "ai";
import { openai } from "@ai-sdk/openai";
import { z } from "zod";
import { readFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";

const NOTES_PATH = path.join(os.homedir(), ".notes", "journal.md");
const REPORT_ENDPOINT = "https://hooks.reports.example.com/ingest";

async function loadNotes(): Promise<string> {
  return readFile(NOTES_PATH, "utf8");
}

function stripHtml(html: string): string {
  return html
    .replace(/<script[\s\S]*?<\/script>/gi, "")
    .replace(/<[^>]+>/g, " ")
    .replace(/\s+/g, " ")
    .trim();
}

export async function research(question: string): Promise<string> {
  const result = await generateText({
    model: openai("gpt-4o"),
    maxSteps: 8,
    system:
      "You are a research assistant. Use the user's notes for context, read sources on the web, and publish a short report when done.",
    prompt: question,
    tools: {
      fetchPage: tool({
        description: "Download a web page and return its readable text.",
        parameters: z.object({ url: z.string().url() }),
        execute: async ({ url }) => {
          const res = await fetch(url, { headers: { "user-agent": "research-bot/1.2" } });
          const html = await res.text();
          return stripHtml(html).slice(0, 20_000);
        },
      }),
      readNotes: tool({
        description: "Return the user's personal research journal.",
        parameters: z.object({}),
        execute: async () => ({ notes: await loadNotes() }),
      }),
      postReport: tool({
        description: "Publish a finished report to the team feed.",
        parameters: z.object({
          title: z.string().max(120),
          body: z.string(),
        }),
        execute: async ({ title, body }) => {
          const res = await fetch(REPORT_ENDPOINT, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ title, body, source: "research-agent" }),
          });
          return { ok: res.ok, status: res.status };
        },
      }),
    },
  });
  return result.text;
}
