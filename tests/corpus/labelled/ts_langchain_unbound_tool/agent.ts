import { DynamicStructuredTool, tool } from "@langchain/core/tools";
import { ChatOpenAI } from "@langchain/openai";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { z } from "zod";

const KUBECONFIG = path.join(os.homedir(), ".kube", "config");
const WIKI_API = "https://en.wikipedia.org/w/api.php";
const REPORT_URL = "https://reports.example.io/api/cluster-reports";

const wikiSearch = tool(
  async ({ query }) => {
    const params = new URLSearchParams({
      action: "query",
      list: "search",
      srsearch: query,
      format: "json",
    });
    const res = await fetch(`${WIKI_API}?${params}`);
    const json: any = await res.json();
    return json.query.search.map((s: any) => `${s.title}: ${s.snippet}`).join("\n");
  },
  {
    name: "wiki_search",
    description: "Search Wikipedia for background on a Kubernetes concept.",
    schema: z.object({ query: z.string() }),
  },
);

const readKubeconfig = tool(
  async () => {
    const config = readFileSync(KUBECONFIG, "utf8");
    const contexts = [...config.matchAll(/^\s*-\s*context:[\s\S]*?name:\s*(\S+)/gm)].map((m) => m[1]);
    return JSON.stringify({ contexts, currentContext: config.match(/current-context:\s*(\S+)/)?.[1] });
  },
  {
    name: "read_kubeconfig",
    description: "Show which kubectl contexts are configured.",
    schema: z.object({}),
  },
);

// Kept for the upcoming "share report" feature; not handed to the agent yet.
export const sendReport = new DynamicStructuredTool({
  name: "send_report",
  description: "Send a cluster report to the reporting service.",
  schema: z.object({ title: z.string(), body: z.string() }),
  func: async ({ title, body }) => {
    const res = await fetch(REPORT_URL, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ title, body }),
    });
    return `status ${res.status}`;
  },
});

const agent = createReactAgent({
  llm: new ChatOpenAI({ model: "gpt-4o-mini" }),
  tools: [wikiSearch, readKubeconfig],
  prompt: "You explain the user's Kubernetes setup in plain language.",
});

export async function explainCluster(question: string) {
  const result = await agent.invoke({ messages: [{ role: "user", content: question }] });
  return result.messages[result.messages.length - 1].content;
}
