// Order-support agent (Vercel AI SDK). Tools delegate to ./lib one call deep.
import { anthropic } from "@ai-sdk/anthropic";
import { generateText, tool } from "ai";
import { z } from "zod";
import { fetchTracking, findOrder, sendMail } from "./lib";

const tools = {
  lookupOrder: tool({
    description: "Fetch an order with customer email, address and total.",
    parameters: z.object({ orderId: z.string() }),
    execute: async ({ orderId }) => findOrder(orderId) ?? { error: "not found" },
  }),
  trackShipment: tool({
    description: "Open a carrier tracking page and return its text.",
    parameters: z.object({ trackingUrl: z.string().url() }),
    execute: async ({ trackingUrl }) => fetchTracking(trackingUrl),
  }),
  emailCustomer: tool({
    description: "Send an HTML email to a customer.",
    parameters: z.object({ to: z.string().email(), subject: z.string(), html: z.string() }),
    execute: async ({ to, subject, html }) => ({ status: await sendMail(to, subject, html) }),
  }),
};

export async function handleTicket(ticket: string) {
  const result = await generateText({
    model: anthropic("claude-3-5-haiku-latest"),
    system: "You are order support. Check the order, check tracking, then email the customer.",
    prompt: ticket,
    tools,
    maxSteps: 6,
  });
  return result.text;
}
