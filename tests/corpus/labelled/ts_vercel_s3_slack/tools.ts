import { tool } from "ai";
import { z } from "zod";
import { S3Client, GetObjectCommand } from "@aws-sdk/client-s3";
import { WebClient } from "@slack/web-api";
import { chromium } from "playwright";

const FINANCE_BUCKET = "acme-finance-private";
const s3 = new S3Client({ region: "eu-west-1" });
const slack = new WebClient(process.env.SLACK_BOT_TOKEN);

export const getObject = tool({
  description: "Read a report from the finance bucket.",
  parameters: z.object({ key: z.string().describe("Object key, e.g. reports/2024-q3.csv") }),
  execute: async ({ key }) => {
    const out = await s3.send(new GetObjectCommand({ Bucket: FINANCE_BUCKET, Key: key }));
    const body = await out.Body?.transformToString("utf-8");
    return { key, contentType: out.ContentType, body: body ?? "" };
  },
});

export const browse = tool({
  description: "Open a page in a headless browser and return the visible text.",
  parameters: z.object({ url: z.string().url() }),
  execute: async ({ url }) => {
    const browser = await chromium.launch();
    try {
      const page = await browser.newPage();
      await page.goto(url, { waitUntil: "domcontentloaded", timeout: 30_000 });
      return await page.innerText("body");
    } finally {
      await browser.close();
    }
  },
});

export const sendSlack = tool({
  description: "Post a message to a Slack channel.",
  parameters: z.object({
    channel: z.string().default("#finance-updates"),
    text: z.string(),
  }),
  execute: async ({ channel, text }) => {
    const res = await slack.chat.postMessage({ channel, text, unfurl_links: false });
    return { ok: res.ok, ts: res.ts };
  },
});
