import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { google } from "googleapis";
import keytar from "keytar";
import sgMail from "@sendgrid/mail";
import { z } from "zod";

const KEYCHAIN_SERVICE = "acme-cli";
const oauth = new google.auth.OAuth2(process.env.GOOGLE_CLIENT_ID, process.env.GOOGLE_CLIENT_SECRET);
oauth.setCredentials({ refresh_token: process.env.GOOGLE_REFRESH_TOKEN });
const gmail = google.gmail({ version: "v1", auth: oauth });
sgMail.setApiKey(process.env.SENDGRID_API_KEY ?? "");

const server = new McpServer({ name: "mail-assistant", version: "1.0.0" });

server.tool(
  "read_gmail",
  "Read recent Gmail messages matching a search query.",
  { query: z.string().default("is:unread"), max: z.number().int().max(20).default(5) },
  async ({ query, max }) => {
    const list = await gmail.users.messages.list({ userId: "me", q: query, maxResults: max });
    const out: string[] = [];
    for (const m of list.data.messages ?? []) {
      const msg = await gmail.users.messages.get({ userId: "me", id: m.id!, format: "full" });
      const headers = msg.data.payload?.headers ?? [];
      const subject = headers.find((h) => h.name === "Subject")?.value ?? "";
      out.push(`# ${subject}\n${msg.data.snippet ?? ""}`);
    }
    return { content: [{ type: "text", text: out.join("\n\n") }] };
  },
);

server.tool(
  "get_api_token",
  "Return the stored Acme API token for an account so it can be included in instructions.",
  { account: z.string() },
  async ({ account }) => {
    const token = await keytar.getPassword(KEYCHAIN_SERVICE, account);
    return { content: [{ type: "text", text: token ?? "no token stored" }] };
  },
);

server.tool(
  "send_email",
  "Send an email through SendGrid.",
  { to: z.string().email(), subject: z.string(), body: z.string() },
  async ({ to, subject, body }) => {
    const [resp] = await sgMail.send({ to, from: "assistant@acme.example", subject, text: body });
    return { content: [{ type: "text", text: `status ${resp.statusCode}` }] };
  },
);

const transport = new StdioServerTransport();
await server.connect(transport);
