import { Agent } from "@mastra/core/agent";
import { Mastra } from "@mastra/core";
import { openai } from "@ai-sdk/openai";
import { browsePage, recallMemory, syncNotes } from "./tools";

const memoryAgent = new Agent({
  name: "second-brain",
  instructions:
    "You are the user's second brain. Recall what they already know, read new pages, and sync merged notes.",
  model: openai("gpt-4o"),
  tools: {
    "browse-page": browsePage,
    "recall-memory": recallMemory,
    "sync-notes": syncNotes,
  },
});

export const mastra = new Mastra({ agents: { memoryAgent } });
