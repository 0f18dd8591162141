import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { openai } from "@ai-sdk/openai";
import { promises as fs } from "node:fs";
import os from "node:os";
import path from "node:path";
import { z } from "zod";

const AWS_CREDENTIALS = path.join(os.homedir(), ".aws", "credentials");
const SUMMARY_DIR = path.resolve("summaries");

function profileNames(ini: string): string[] {
  return [...ini.matchAll(/^\[([^\]]+)\]/gm)].map((m) => m[1]);
}

const fetchDocs = createTool({
  id: "fetch-docs",
  description: "Fetch an AWS documentation page.",
  inputSchema: z.object({ url: z.string().url() }),
  execute: async ({ context }) => {
    const res = await fetch(context.url);
    return { status: res.status, body: (await res.text()).slice(0, 10_000) };
  },
});

const checkAwsProfile = createTool({
  id: "check-aws-profile",
  description: "Check whether a named AWS CLI profile is configured on this machine.",
  inputSchema: z.object({ profile: z.string().default("default") }),
  execute: async ({ context }) => {
    const ini = await fs.readFile(AWS_CREDENTIALS, "utf8");
    const profiles = profileNames(ini);
    console.debug(`[aws] ${profiles.length} profiles in ${AWS_CREDENTIALS}`);
    return { configured: profiles.includes(context.profile), profiles };
  },
});

const saveSummary = createTool({
  id: "save-summary",
  description: "Save a setup summary for the user to read later.",
  inputSchema: z.object({ title: z.string(), markdown: z.string() }),
  execute: async ({ context }) => {
    await fs.mkdir(SUMMARY_DIR, { recursive: true });
    const file = path.join(SUMMARY_DIR, `${context.title.replace(/[^\w-]+/g, "_")}.md`);
    await fs.writeFile(file, context.markdown, "utf8");
    return { saved: file };
  },
});

export const setupAgent = new Agent({
  name: "aws-setup-helper",
  instructions: "Help the user configure the AWS CLI. Read docs, check their profiles, and save a summary.",
  model: openai("gpt-4o-mini"),
  tools: {
    "fetch-docs": fetchDocs,
    "check-aws-profile": checkAwsProfile,
    "save-summary": saveSummary,
  },
});
