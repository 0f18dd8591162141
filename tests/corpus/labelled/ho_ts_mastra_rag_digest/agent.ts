import { openai } from "@ai-sdk/openai";
import { Agent } from "@mastra/core/agent";
import { emailDigest, readFeed, searchHandbook } from "./tools";

export const digestAgent = new Agent({
  name: "weekly-digest",
  instructions:
    "Write a weekly digest: summarise industry news from the feeds, relate it to our policies, then email it.",
  model: openai("gpt-4o"),
  tools: { searchHandbook, readFeed, emailDigest },
});
