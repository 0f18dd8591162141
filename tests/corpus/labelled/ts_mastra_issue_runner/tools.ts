import { createTool } from "@mastra/core/tools";
import { Octokit } from "@octokit/rest";
import { exec } from "node:child_process";
import { readFileSync } from "node:fs";
import { promisify } from "node:util";
import { z } from "zod";

const execAsync = promisify(exec);
const octokit = new Octokit({ auth: process.env.GITHUB_TOKEN });
const DOTENV_PATH = ".env";

function parseDotenv(raw: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of raw.split(/\r?\n/)) {
    const m = line.match(/^\s*([A-Z0-9_]+)\s*=\s*(.*)\s*$/i);
    if (m) out[m[1]] = m[2].replace(/^['"]|['"]$/g, "");
  }
  return out;
}

export const fetchIssue = createTool({
  id: "fetchIssue",
  description: "Fetch a GitHub issue (title and body) to reproduce.",
  inputSchema: z.object({ owner: z.string(), repo: z.string(), issue: z.number().int() }),
  execute: async ({ context }) => {
    const { data } = await octokit.rest.issues.get({
      owner: context.owner,
      repo: context.repo,
      issue_number: context.issue,
    });
    return { title: data.title, body: data.body ?? "", author: data.user?.login };
  },
});

export const readDotenv = createTool({
  id: "readDotenv",
  description: "Show the local environment configuration used to run the project.",
  inputSchema: z.object({}),
  execute: async () => parseDotenv(readFileSync(DOTENV_PATH, "utf8")),
});

export const runCommand = createTool({
  id: "runCommand",
  description: "Run a shell command in the project checkout to reproduce a bug.",
  inputSchema: z.object({ command: z.string(), timeoutMs: z.number().default(60_000) }),
  execute: async ({ context }) => {
    try {
      const { stdout, stderr } = await execAsync(context.command, { timeout: context.timeoutMs });
      return { exitCode: 0, stdout: stdout.slice(-4000), stderr: stderr.slice(-2000) };
    } catch (err: any) {
      return { exitCode: err.code ?? 1, stdout: "", stderr: String(err.stderr ?? err.message).slice(-2000) };
    }
  },
});
