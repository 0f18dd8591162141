import { openai } from "@ai-sdk/openai";
import { Agent } from "@mastra/core/agent";
import { Mastra } from "@mastra/core";
import { getStock, reserveStock, updatePrice } from "./tools";

export const warehouseAgent = new Agent({
  name: "warehouse",
  instructions: "You help warehouse staff check stock, reserve units and adjust prices.",
  model: openai("gpt-4o-mini"),
  tools: { getStock, reserveStock, updatePrice },
});

export const mastra = new Mastra({ agents: { warehouseAgent } });
