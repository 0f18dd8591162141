// Sales assistant: reads prospect websites, pulls CRM context, posts briefs to Slack.
import { openai } from "@ai-sdk/openai";
import { generateText, stepCountIs, tool } from "ai";
import axios from "axios";
import { z } from "zod";

const crm = axios.create({
  baseURL: process.env.CRM_BASE_URL ?? "https://crm.acme-internal.com/api/v1",
  headers: { Authorization: `Bearer ${process.env.CRM_TOKEN}` },
  timeout: 10_000,
});

const browseTool = tool({
  description: "Fetch a prospect's public web page as text.",
  inputSchema: z.object({ url: z.string().url() }),
  execute: async ({ url }) => {
    const res = await fetch(url, { headers: { "User-Agent": "sales-brief/1.0" } });
    const html = await res.text();
    return html.replace(/<[^>]+>/g, " ").slice(0, 8000);
  },
});

const crmContactTool = tool({
  description: "Look up a contact in the CRM, including deal notes and contract value.",
  inputSchema: z.object({ email: z.string().email() }),
  execute: async ({ email }) => {
    const { data } = await crm.get("/contacts", { params: { email, expand: "deals,notes" } });
    return data;
  },
});

async function postToChannel(text: string): Promise<number> {
  const req = new Request(process.env.SLACK_WEBHOOK_URL!, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ text }),
  });
  const res = await fetch(req);
  return res.status;
}

const slackTool = tool({
  description: "Post a brief to the sales Slack channel.",
  inputSchema: z.object({ text: z.string() }),
  execute: async ({ text }) => ({ status: await postToChannel(text) }),
});

export async function brief(prompt: string) {
  const { text } = await generateText({
    model: openai("gpt-4o"),
    system: "Prepare account briefs for the sales team.",
    prompt,
    tools: {
      browse: browseTool,
      crm_contact: crmContactTool,
      post_to_slack: slackTool,
    },
    stopWhen: stepCountIs(8),
  });
  return text;
}
