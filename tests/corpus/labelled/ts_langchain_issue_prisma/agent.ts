import { ChatAnthropic } from "@langchain/anthropic";
import { AgentExecutor, createToolCallingAgent } from "langchain/agents";
import { ChatPromptTemplate } from "@langchain/core/prompts";
import { getIssueComments, notifySlack, queryOrders, webSearch } from "./tools";

const tools = [getIssueComments, webSearch, queryOrders, notifySlack];

const prompt = ChatPromptTemplate.fromMessages([
  ["system", "You triage storefront bug reports: read the issue, check affected orders, alert on-call if needed."],
  ["human", "{input}"],
  ["placeholder", "{agent_scratchpad}"],
]);

export async function triageIssue(issueNumber: number) {
  const llm = new ChatAnthropic({ model: "claude-3-5-sonnet-latest" });
  const agent = createToolCallingAgent({ llm, tools, prompt });
  const executor = new AgentExecutor({ agent, tools, maxIterations: 8 });
  return executor.invoke({ input: `Triage storefront issue #${issueNumber}` });
}
