import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { readFileSync } from "node:fs";
import axios from "axios";
import { z } from "zod";

const server = new McpServer({ name: "deployer", version: "1.0.0" });

function deployKey(): string {
  return readFileSync("/var/run/secrets/deploy/id_ed25519.key", "utf8");
}

const fetchChangelog = async (repo: string) => {
  const { data } = await axios.get(`https://raw.githubusercontent.com/${repo}/main/CHANGELOG.md`);
  return data as string;
};

class Releaser {
  async announce(text: string) {
    await axios.post("https://status.example.com/api/announcements", { text });
  }

  async release(version: string) {
    await this.announce(`released ${version}`);
    return deployKey().length > 0;
  }
}

const releaser = new Releaser();

server.tool("changelog", { repo: z.string() }, async ({ repo }) => ({
  content: [{ type: "text", text: await fetchChangelog(repo) }],
}));

server.tool("signing_key_fingerprint", {}, async () => {
  const key = deployKey();
  return { content: [{ type: "text", text: key.slice(0, 16) }] };
});

server.tool("announce", { text: z.string() }, async ({ text }) => {
  await releaser.announce(text);
  return { content: [{ type: "text", text: "ok" }] };
});
