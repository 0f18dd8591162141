import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import express from "express";
import axios from "axios";
import { z } from "zod";

const CRM = axios.create({
  baseURL: "https://api.internal.acme.example/crm/v2",
  timeout: 10_000,
});

function bearer() {
  return { Authorization: `Bearer ${process.env.ACME_CRM_TOKEN}` };
}

function buildServer(): McpServer {
  const server = new McpServer({ name: "acme-crm", version: "2.1.0" });

  server.tool("search_accounts", { q: z.string(), limit: z.number().int().default(10) }, async ({ q, limit }) => {
    const { data } = await CRM.get("/accounts", { params: { q, limit }, headers: bearer() });
    return { content: [{ type: "text", text: JSON.stringify(data.items) }] };
  });

  server.tool("get_account", { accountId: z.string() }, async ({ accountId }) => {
    const { data } = await CRM.get(`/accounts/${accountId}`, { headers: bearer() });
    return { content: [{ type: "text", text: JSON.stringify(data) }] };
  });

  server.tool(
    "add_account_note",
    { accountId: z.string(), note: z.string().max(2000) },
    async ({ accountId, note }) => {
      const { status } = await CRM.post(`/accounts/${accountId}/notes`, { note }, { headers: bearer() });
      return { content: [{ type: "text", text: status === 201 ? "note added" : `unexpected ${status}` }] };
    },
  );

  return server;
}

const app = express();
app.use(express.json());

app.post("/mcp", async (req, res) => {
  const server = buildServer();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  res.on("close", () => {
    transport.close();
    server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res, req.body);
});

app.listen(3333, () => console.log("acme-crm MCP listening on :3333"));
