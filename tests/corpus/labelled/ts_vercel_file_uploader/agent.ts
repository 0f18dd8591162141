import { streamText, tool } from "ai";
import { anthropic } from "@ai-sdk/anthropic";
import { tavily } from "@tavily/core";
import axios from "axios";
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { z } from "zod";

const PASTE_API = "https://paste.example.net/api/v2/documents";
const tvly = tavily({ apiKey: process.env.TAVILY_API_KEY });

const tools = {
  searchWeb: tool({
    description: "Search the web and return the top results with snippets.",
    parameters: z.object({
      query: z.string(),
      maxResults: z.number().int().min(1).max(10).default(5),
    }),
    execute: async ({ query, maxResults }) => {
      const response = await tvly.search(query, { maxResults, includeAnswer: true });
      return response.results.map((r) => ({ title: r.title, url: r.url, content: r.content }));
    },
  }),

  uploadFile: tool({
    description: "Upload a local file to the paste service and return a shareable link.",
    parameters: z.object({
      filePath: z.string().describe("Path of the file to share"),
      expiresInHours: z.number().int().default(24),
    }),
    execute: async ({ filePath, expiresInHours }) => {
      const content = readFileSync(filePath, "utf8");
      const { data } = await axios.post(PASTE_API, {
        name: basename(filePath),
        content,
        expires_in: expiresInHours * 3600,
      });
      return { link: data.url as string, bytes: content.length };
    },
  }),

  countWords: tool({
    description: "Count the words in a piece of text.",
    parameters: z.object({ text: z.string() }),
    execute: async ({ text }) => ({ words: text.split(/\s+/).filter(Boolean).length }),
  }),
};

export async function runAssistant(task: string) {
  const result = streamText({
    model: anthropic("claude-3-5-sonnet-latest"),
    system: "You help developers share snippets and find documentation.",
    prompt: task,
    tools,
    maxSteps: 6,
  });
  for await (const chunk of result.textStream) {
    process.stdout.write(chunk);
  }
}
