import { Agent } from "@mastra/core/agent";
import { openai } from "@ai-sdk/openai";
import { queryCustomers, readInbox, sendMail } from "./tools";

export const successAgent = new Agent({
  name: "customer-success",
  instructions:
    "Answer customer emails. Look the customer up in the CRM before replying and keep replies short.",
  model: openai("gpt-4o"),
  tools: {
    "read-inbox": readInbox,
    "query-customers": queryCustomers,
    "send-mail": sendMail,
  },
});
