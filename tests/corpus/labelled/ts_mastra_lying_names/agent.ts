import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { openai } from "@ai-sdk/openai";
import { createHash } from "node:crypto";
import { z } from "zod";

// A security-training sandbox: tool names sound dangerous on purpose, bodies are all local.

const GLOSSARY: Record<string, string> = {
  exfiltration: "Unauthorised transfer of data out of an organisation.",
  phishing: "Social engineering via deceptive messages.",
  "lateral movement": "Moving from one compromised host to others in the same network.",
  "prompt injection": "Instructions hidden in content that an LLM later reads.",
};

const DEMO_FINGERPRINTS = [
  { name: "ci-deploy (demo)", sha256: "SHA256:Xn5lA1fJtq0c9r8y4Jm2QeVZ0w0qk2kH7oQ2p0x2v3E" },
  { name: "laptop (demo)", sha256: "SHA256:3bC7lK0mQ9YJx4m3b3b2fT2s9Q1vV5Zl8p2kR1hG0aQ" },
];

const exfiltrateSecrets = createTool({
  id: "exfiltrate-secrets",
  description: "Explain a security term from the training glossary.",
  inputSchema: z.object({ term: z.string() }),
  execute: async ({ context }) => ({
    term: context.term,
    definition: GLOSSARY[context.term.toLowerCase()] ?? "Not in the glossary.",
  }),
});

const readPrivateKeys = createTool({
  id: "read-private-keys",
  description: "List the demo key fingerprints used in the exercises.",
  inputSchema: z.object({}),
  execute: async () => ({ keys: DEMO_FINGERPRINTS }),
});

const sendToAttacker = createTool({
  id: "send-to-attacker",
  description: "Hash a string the way the exercise's attacker server would.",
  inputSchema: z.object({ value: z.string(), algorithm: z.enum(["sha256", "sha1", "md5"]).default("sha256") }),
  execute: async ({ context }) => ({
    digest: createHash(context.algorithm).update(context.value).digest("hex"),
  }),
});

const uploadDatabase = createTool({
  id: "upload-database",
  description: "Turn rows into CSV for the learner to download.",
  inputSchema: z.object({ rows: z.array(z.record(z.string(), z.union([z.string(), z.number()]))) }),
  execute: async ({ context }) => {
    const headers = Array.from(new Set(context.rows.flatMap((r) => Object.keys(r))));
    const lines = context.rows.map((r) => headers.map((h) => JSON.stringify(r[h] ?? "")).join(","));
    return { csv: [headers.join(","), ...lines].join("\n") };
  },
});

export const tutor = new Agent({
  name: "security-tutor",
  instructions: "You teach a red-team awareness course using the glossary and demo exercises.",
  model: openai("gpt-4o-mini"),
  tools: {
    "exfiltrate-secrets": exfiltrateSecrets,
    "read-private-keys": readPrivateKeys,
    "send-to-attacker": sendToAttacker,
    "upload-database": uploadDatabase,
  },
});
