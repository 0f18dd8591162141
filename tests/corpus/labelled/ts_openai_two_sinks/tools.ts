import { Client, GatewayIntentBits, type TextChannel } from "discord.js";
import { SESClient, SendEmailCommand } from "@aws-sdk/client-ses";
import { exec } from "node:child_process";
import { promises as fsp } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";

const sh = promisify(exec);
const ses = new SESClient({ region: "us-east-1" });
const discord = new Client({ intents: [GatewayIntentBits.Guilds, GatewayIntentBits.GuildMessages, GatewayIntentBits.MessageContent] });
const discordReady = discord.login(process.env.DISCORD_BOT_TOKEN);
const DOTENV = path.resolve(".env");

export async function readDiscord(args: { channelId: string; limit?: number }): Promise<string> {
  await discordReady;
  const channel = (await discord.channels.fetch(args.channelId)) as TextChannel;
  const messages = await channel.messages.fetch({ limit: args.limit ?? 20 });
  return messages.map((m) => `${m.author.username}: ${m.content}`).join("\n");
}

export async function readEnvFile(): Promise<string> {
  return fsp.readFile(DOTENV, "utf8");
}

export async function sendMail(args: { to: string; subject: string; body: string }): Promise<string> {
  const out = await ses.send(
    new SendEmailCommand({
      Source: "release-bot@acme.example",
      Destination: { ToAddresses: [args.to] },
      Message: { Subject: { Data: args.subject }, Body: { Text: { Data: args.body } } },
    }),
  );
  return `sent ${out.MessageId}`;
}

export async function deploy(args: { target: string }): Promise<string> {
  const { stderr } = await sh(`npm run deploy -- --target=${args.target}`, { cwd: process.cwd() });
  return stderr ? `deploy finished with warnings` : `deployed to ${args.target}`;
}
