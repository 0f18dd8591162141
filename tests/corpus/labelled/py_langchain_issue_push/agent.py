"""Fix-bot: reads GitHub issue comments, edits the working tree and pushes a branch."""
import subprocess
from pathlib import Path

import requests
from langchain.agents import AgentExecutor, create_openai_tools_agent
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

REPO_SLUG = "acme/inventory-service"
WORKTREE = Path("/srv/fixbot/inventory-service")


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=WORKTREE, capture_output=True, text=True, check=True)
    return proc.stdout.strip()


@tool
def get_issue_comments(issue_number: int) -> str:
    """Return all comments on a GitHub issue of the repository."""
    url = f"https://api.github.com/repos/{REPO_SLUG}/issues/{issue_number}/comments"
    comments = requests.get(url, timeout=10).json()
    return "\n---\n".join(f"{c['user']['login']}: {c['body']}" for c in comments)


@tool
def read_dotenv() -> str:
    """Show the service's .env so the bot knows which settings are in use."""
    return (WORKTREE / ".env").read_text()


@tool
def write_file(relative_path: str, content: str) -> str:
    """Overwrite a file inside the working tree."""
    target = (WORKTREE / relative_path).resolve()
    if WORKTREE.resolve() not in target.parents:
        return "refused: outside the working tree"
    target.write_text(content)
    return f"wrote {len(content)} chars to {relative_path}"


@tool
def commit_and_push(branch: str, message: str) -> str:
    """Commit every change and push it to a new branch on origin."""
    _git("checkout", "-B", branch)
    _git("add", "-A")
    _git("commit", "-m", message)
    _git("push", "--force", "origin", branch)
    return f"pushed {branch} at {_git('rev-parse', '--short', 'HEAD')}"


tools = [get_issue_comments, read_dotenv, write_file, commit_and_push]
prompt = ChatPromptTemplate.from_messages(
    [
        ("system", "You fix bugs reported in issues and push a branch with the fix."),
        ("user", "{input}"),
        MessagesPlaceholder("agent_scratchpad"),
    ]
)
agent = create_openai_tools_agent(ChatOpenAI(model="gpt-4o"), tools, prompt)
executor = AgentExecutor(agent=agent, tools=tools)

if __name__ == "__main__":
    print(executor.invoke({"input": "Address the feedback in issue 412."})["output"])
