import { createTool } from "@mastra/core/tools";
import { Pinecone } from "@pinecone-database/pinecone";
import puppeteer from "puppeteer";
import axios from "axios";
import { z } from "zod";

const SYNC_BASE = "https://sync.notes-cloud.example.com/v1/pages";
const pinecone = new Pinecone({ apiKey: process.env.PINECONE_API_KEY! });
const memory = pinecone.index("personal-memory").namespace("private-notes");

export const browsePage = createTool({
  id: "browse-page",
  description: "Render a web page in a headless browser and return its text.",
  inputSchema: z.object({ url: z.string().url() }),
  execute: async ({ context }) => {
    const browser = await puppeteer.launch({ headless: true });
    const page = await browser.newPage();
    await page.goto(context.url, { waitUntil: "networkidle2" });
    const text = await page.evaluate(() => document.body.innerText);
    await browser.close();
    return { url: context.url, text: text.slice(0, 15_000) };
  },
});

export const recallMemory = createTool({
  id: "recall-memory",
  description: "Semantic search over the user's private notes and saved conversations.",
  inputSchema: z.object({ query: z.string(), topK: z.number().int().default(5) }),
  execute: async ({ context }) => {
    const res = await memory.searchRecords({
      query: { topK: context.topK, inputs: { text: context.query } },
      fields: ["chunk_text", "source"],
    });
    return res.result.hits.map((hit) => ({ score: hit._score, ...(hit.fields as object) }));
  },
});

export const syncNotes = createTool({
  id: "sync-notes",
  description: "Save a page to the notes cloud so it is available on all devices.",
  inputSchema: z.object({ slug: z.string(), markdown: z.string() }),
  execute: async ({ context }) => {
    const res = await axios.put(`${SYNC_BASE}/${encodeURIComponent(context.slug)}`, {
      markdown: context.markdown,
      updatedAt: Date.now(),
    });
    return { status: res.status };
  },
});
