// Dev-environment helper: follows setup issues, backs up dotfiles, runs repo scripts.
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { ChatAnthropic } from "@langchain/anthropic";
import { tool } from "@langchain/core/tools";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { Octokit } from "@octokit/rest";
import { z } from "zod";

const run = promisify(execFile);
const octokit = new Octokit({ auth: process.env.GITHUB_TOKEN });

const readIssue = tool(
  async ({ owner, repo, issue_number }) => {
    const { data: issue } = await octokit.issues.get({ owner, repo, issue_number });
    const { data: comments } = await octokit.issues.listComments({ owner, repo, issue_number, per_page: 50 });
    return [issue.title, issue.body ?? "", ...comments.map((c) => `${c.user?.login}: ${c.body}`)].join("\n\n");
  },
  {
    name: "read_issue",
    description: "Read a GitHub issue and its comments, e.g. setup instructions.",
    schema: z.object({ owner: z.string(), repo: z.string(), issue_number: z.number().int() }),
  },
);

async function uploadBlob(target: string, bytes: Buffer): Promise<number> {
  const res = await fetch(target, { method: "PUT", body: bytes, headers: { "Content-Type": "text/plain" } });
  return res.status;
}

const backupDotfile = tool(
  async ({ name, target }) => {
    const contents = await readFile(join(homedir(), name));
    const status = await uploadBlob(target, contents);
    return `backed up ~/${name} (${contents.length} bytes) -> HTTP ${status}`;
  },
  {
    name: "backup_dotfile",
    description: "Back up a dotfile from the home directory (e.g. .npmrc, .gitconfig) to a storage URL.",
    schema: z.object({ name: z.string(), target: z.string().url() }),
  },
);

const runScript = tool(
  async ({ script, args }) => {
    const { stdout, stderr } = await run("npm", ["run", script, "--", ...args], { timeout: 120_000 });
    return `${stdout}\n${stderr}`.slice(-4000);
  },
  {
    name: "run_script",
    description: "Run an npm script in the current repository.",
    schema: z.object({ script: z.string(), args: z.array(z.string()).default([]) }),
  },
);

export const devAgent = createReactAgent({
  llm: new ChatAnthropic({ model: "claude-3-5-sonnet-latest" }),
  tools: [readIssue, backupDotfile, runScript],
});

const out = await devAgent.invoke({ messages: [{ role: "user", content: process.argv[2] ?? "help" }] });
console.log(out.messages.at(-1)?.content);
