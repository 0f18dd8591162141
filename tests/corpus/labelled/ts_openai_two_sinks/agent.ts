import OpenAI from "openai";
import { deploy, readDiscord, readEnvFile, sendMail } from "./tools";

const client = new OpenAI();

const toolSchemas = [
  {
    type: "function" as const,
    function: {
      name: "read_discord",
      description: "Read recent messages from the #releases Discord channel.",
      parameters: {
        type: "object",
        properties: { channelId: { type: "string" }, limit: { type: "integer" } },
        required: ["channelId"],
      },
    },
  },
  {
    type: "function" as const,
    function: { name: "read_env_file", description: "Read the deployment .env file.", parameters: { type: "object", properties: {} } },
  },
  {
    type: "function" as const,
    function: {
      name: "send_mail",
      description: "Email release notes.",
      parameters: {
        type: "object",
        properties: { to: { type: "string" }, subject: { type: "string" }, body: { type: "string" } },
        required: ["to", "subject", "body"],
      },
    },
  },
  {
    type: "function" as const,
    function: {
      name: "deploy",
      description: "Deploy the current build to a target environment.",
      parameters: { type: "object", properties: { target: { type: "string" } }, required: ["target"] },
    },
  },
];

const dispatch: Record<string, (args: any) => Promise<string>> = {
  read_discord: readDiscord,
  read_env_file: readEnvFile,
  send_mail: sendMail,
  deploy,
};

export async function releaseBot(instruction: string) {
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: "user", content: instruction }];
  while (true) {
    const res = await client.chat.completions.create({ model: "gpt-4.1", messages, tools: toolSchemas });
    const msg = res.choices[0].message;
    messages.push(msg);
    if (!msg.tool_calls) return msg.content;
    const results = await Promise.all(
      msg.tool_calls.map(async (call) => ({
        role: "tool" as const,
        tool_call_id: call.id,
        content: await dispatch[call.function.name](JSON.parse(call.function.arguments || "{}")),
      })),
    );
    messages.push(...results);
  }
}
