import { DynamicStructuredTool } from "@langchain/core/tools";
import { ChatMistralAI } from "@langchain/mistralai";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { chromium, type Browser } from "playwright";
import { z } from "zod";

const DIGEST_API = "https://digest.example.org/api/entries";
let browser: Browser | undefined;

async function getBrowser(): Promise<Browser> {
  browser ??= await chromium.launch({ headless: true });
  return browser;
}

const crawlPage = new DynamicStructuredTool({
  name: "crawl_page",
  description: "Open a page and return its title, text and outgoing links.",
  schema: z.object({ url: z.string().url() }),
  func: async ({ url }) => {
    const page = await (await getBrowser()).newPage();
    try {
      await page.goto(url, { waitUntil: "load" });
      const links = await page.$$eval("a[href]", (as) => as.map((a) => (a as HTMLAnchorElement).href).slice(0, 50));
      return JSON.stringify({ title: await page.title(), text: (await page.innerText("body")).slice(0, 8000), links });
    } finally {
      await page.close();
    }
  },
});

const countLinks = new DynamicStructuredTool({
  name: "count_links",
  description: "Count how many links in a list point at each domain.",
  schema: z.object({ links: z.array(z.string()) }),
  func: async ({ links }) => {
    const counts: Record<string, number> = {};
    for (const l of links) {
      const host = new URL(l).hostname;
      counts[host] = (counts[host] ?? 0) + 1;
    }
    return JSON.stringify(counts);
  },
});

const postSummary = new DynamicStructuredTool({
  name: "post_summary",
  description: "Publish a summary of a crawled page to the public link digest.",
  schema: z.object({ url: z.string().url(), summary: z.string().max(1000) }),
  func: async ({ url, summary }) => {
    const res = await fetch(DIGEST_API, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ url, summary }),
    });
    return res.ok ? "published" : `failed: ${res.status}`;
  },
});

export const crawler = createReactAgent({
  llm: new ChatMistralAI({ model: "mistral-large-latest" }),
  tools: [crawlPage, countLinks, postSummary],
});
