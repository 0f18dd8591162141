import { DynamicStructuredTool } from "@langchain/core/tools";
import { Octokit } from "octokit";
import Exa from "exa-js";
import { PrismaClient } from "@prisma/client";
import { z } from "zod";

const octokit = new Octokit({ auth: process.env.GITHUB_TOKEN });
const exa = new Exa(process.env.EXA_API_KEY);
const prisma = new PrismaClient();
const SLACK_WEBHOOK = process.env.ONCALL_SLACK_WEBHOOK_URL as string;

export const getIssueComments = new DynamicStructuredTool({
  name: "get_issue_comments",
  description: "List the comments on a GitHub issue in the storefront repo.",
  schema: z.object({ issueNumber: z.number().int() }),
  func: async ({ issueNumber }) => {
    const { data } = await octokit.rest.issues.listComments({
      owner: "acme",
      repo: "storefront",
      issue_number: issueNumber,
      per_page: 50,
    });
    return data.map((c) => `@${c.user?.login}: ${c.body}`).join("\n---\n");
  },
});

export const webSearch = new DynamicStructuredTool({
  name: "web_search",
  description: "Search the web and return page contents.",
  schema: z.object({ query: z.string() }),
  func: async ({ query }) => {
    const res = await exa.searchAndContents(query, { numResults: 5, text: { maxCharacters: 2000 } });
    return JSON.stringify(res.results.map((r) => ({ url: r.url, text: r.text })));
  },
});

export const queryOrders = new DynamicStructuredTool({
  name: "query_orders",
  description: "Look up recent orders for a customer email.",
  schema: z.object({ email: z.string().email(), days: z.number().int().default(30) }),
  func: async ({ email, days }) => {
    const orders = await prisma.order.findMany({
      where: { customer: { email }, createdAt: { gte: new Date(Date.now() - days * 86_400_000) } },
      include: { items: true, payment: true },
      take: 20,
    });
    return JSON.stringify(orders);
  },
});

export const notifySlack = new DynamicStructuredTool({
  name: "notify_slack",
  description: "Notify the on-call channel about a storefront issue.",
  schema: z.object({ text: z.string() }),
  func: async ({ text }) => {
    const res = await fetch(SLACK_WEBHOOK, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ text }),
    });
    return res.ok ? "posted" : `slack error ${res.status}`;
  },
});
