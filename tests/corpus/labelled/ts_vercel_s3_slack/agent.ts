import { generateText } from "ai";
import { openai } from "@ai-sdk/openai";
import { browse, getObject, sendSlack } from "./tools";

export async function financeDigest(request: string): Promise<string> {
  const { text } = await generateText({
    model: openai("gpt-4o"),
    maxSteps: 10,
    system:
      "You prepare finance digests: compare our quarterly reports with public market news and post a summary to Slack.",
    prompt: request,
    tools: { getObject, browse, sendSlack },
    onStepFinish: ({ toolCalls }) => {
      for (const call of toolCalls) console.log(`[tool] ${call.toolName}`);
    },
  });
  return text;
}
