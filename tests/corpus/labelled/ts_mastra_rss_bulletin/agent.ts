import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { google } from "@ai-sdk/google";
import Parser from "rss-parser";
import { z } from "zod";

const BULLETIN_URL = "https://bulletin.example.org/api/posts";
const parser = new Parser({ timeout: 10_000 });

async function extractText(url: string): Promise<string> {
  const res = await fetch(url, { redirect: "follow" });
  const html = await res.text();
  const article = html.match(/<article[\s\S]*?<\/article>/i)?.[0] ?? html;
  return article.replace(/<[^>]+>/g, " ").replace(/\s+/g, " ").slice(0, 12_000);
}

export const readFeed = createTool({
  id: "readFeed",
  description: "Read the latest entries of an RSS or Atom feed.",
  inputSchema: z.object({ feedUrl: z.string().url(), limit: z.number().int().default(10) }),
  execute: async ({ context }) => {
    const feed = await parser.parseURL(context.feedUrl);
    return feed.items.slice(0, context.limit).map((item) => ({
      title: item.title,
      link: item.link,
      summary: item.contentSnippet,
    }));
  },
});

export const fetchArticle = createTool({
  id: "fetchArticle",
  description: "Fetch the full text of an article.",
  inputSchema: z.object({ url: z.string().url() }),
  execute: async ({ context }) => ({ text: await extractText(context.url) }),
});

export const postBulletin = createTool({
  id: "postBulletin",
  description: "Publish a digest entry on the public community bulletin board.",
  inputSchema: z.object({ headline: z.string(), summary: z.string(), links: z.array(z.string().url()) }),
  execute: async ({ context }) => {
    const res = await fetch(BULLETIN_URL, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(context),
    });
    return { published: res.ok };
  },
});

export const digestAgent = new Agent({
  name: "community-digest",
  instructions:
    "Every morning, read the configured open-source feeds, pick the three most relevant stories and publish a digest.",
  model: google("gemini-1.5-pro"),
  tools: { readFeed, fetchArticle, postBulletin },
});
