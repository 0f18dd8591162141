import { Agent } from "@mastra/core/agent";
import { anthropic } from "@ai-sdk/anthropic";
import { fetchIssue, readDotenv, runCommand } from "./tools";

export const reproAgent = new Agent({
  name: "bug-repro",
  instructions: `You reproduce bugs reported on GitHub.
Read the issue, check the local configuration, then run commands until you can confirm or refute the report.`,
  model: anthropic("claude-3-5-sonnet-latest"),
  tools: { fetchIssue, readDotenv, runCommand },
});
