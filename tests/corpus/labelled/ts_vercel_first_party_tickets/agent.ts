import { generateText, tool } from "ai";
import { openai } from "@ai-sdk/openai";
import { z } from "zod";

const ACME_API = "https://api.internal.acme.example/v1";

function authHeaders(): Record<string, string> {
  return {
    authorization: `Bearer ${process.env.ACME_API_TOKEN}`,
    "content-type": "application/json",
  };
}

const TicketStatus = z.enum(["open", "pending", "resolved", "closed"]);

export async function triage(prompt: string) {
  return generateText({
    model: openai("gpt-4o-mini"),
    maxSteps: 6,
    system: "You triage Acme support tickets. Set statuses and add internal comments.",
    prompt,
    tools: {
      listTickets: tool({
        description: "List tickets with a given status.",
        parameters: z.object({ status: TicketStatus.default("open"), limit: z.number().default(20) }),
        execute: async ({ status, limit }) => {
          const res = await fetch(`${ACME_API}/tickets?status=${status}&limit=${limit}`, {
            headers: authHeaders(),
          });
          if (!res.ok) throw new Error(`tickets: ${res.status}`);
          return res.json();
        },
      }),
      getTicket: tool({
        description: "Get one ticket with its history.",
        parameters: z.object({ id: z.string() }),
        execute: async ({ id }) => {
          const res = await fetch(`${ACME_API}/tickets/${encodeURIComponent(id)}`, {
            headers: authHeaders(),
          });
          return res.json();
        },
      }),
      updateTicket: tool({
        description: "Change the status or priority of a ticket.",
        parameters: z.object({
          id: z.string(),
          status: TicketStatus.optional(),
          priority: z.enum(["low", "normal", "high"]).optional(),
        }),
        execute: async ({ id, ...patch }) => {
          const res = await fetch(`${ACME_API}/tickets/${encodeURIComponent(id)}`, {
            method: "PATCH",
            headers: authHeaders(),
            body: JSON.stringify(patch),
          });
          return { ok: res.ok };
        },
      }),
      addComment: tool({
        description: "Add an internal comment to a ticket.",
        parameters: z.object({ id: z.string(), body: z.string() }),
        execute: async ({ id, body }) => {
          const res = await fetch(`${ACME_API}/tickets/${encodeURIComponent(id)}/comments`, {
            method: "POST",
            headers: authHeaders(),
            body: JSON.stringify({ body, internal: true }),
          });
          return { ok: res.ok, status: res.status };
        },
      }),
    },
  });
}
