"""Triage agent: reads a public GitHub issue, finds similar incidents, files a ticket."""
import sqlite3

import httpx
from llama_index.core.agent import ReActAgent
from llama_index.core.tools import FunctionTool
from llama_index.llms.openai import OpenAI

from config import SETTINGS


def _gh_issue(repo: str, number: int) -> str:
    headers = {"Authorization": f"token {SETTINGS.github_token}", "Accept": "application/vnd.github+json"}
    with httpx.Client(base_url=SETTINGS.github_api, headers=headers, timeout=20) as gh:
        issue = gh.get(f"/repos/{repo}/issues/{number}").json()
        comments = gh.get(f"/repos/{repo}/issues/{number}/comments").json()
    thread = [f"{issue['title']}\n{issue.get('body') or ''}"]
    thread += [f"@{c['user']['login']}: {c['body']}" for c in comments]
    return "\n---\n".join(thread)


def _similar(keyword: str, limit: int = 5) -> str:
    conn = sqlite3.connect(SETTINGS.incidents_db)
    try:
        rows = conn.execute(
            "SELECT id, customer, summary, root_cause FROM incidents WHERE summary LIKE ? LIMIT ?",
            (f"%{keyword}%", limit),
        ).fetchall()
    finally:
        conn.close()
    return "\n".join(" | ".join(str(col) for col in row) for row in rows) or "no matches"


def _file_ticket(title: str, description: str, severity: str = "p3") -> str:
    with httpx.Client(base_url=SETTINGS.tracker_url, timeout=20) as tracker:
        resp = tracker.post(
            "/api/v2/tickets",
            headers={"X-Api-Key": SETTINGS.tracker_key},
            json={"title": title, "description": description, "severity": severity},
        )
    return f"ticket {resp.json().get('key', '?')} created"


def _save_note(slug: str, text: str) -> str:
    SETTINGS.notes_dir.mkdir(parents=True, exist_ok=True)
    (SETTINGS.notes_dir / f"{slug}.md").write_text(text)
    return "saved"


tools = [
    FunctionTool.from_defaults(fn=_gh_issue, name="read_issue", description="Read a GitHub issue and its comments."),
    FunctionTool.from_defaults(fn=_similar, name="similar_incidents", description="Search past incidents."),
    FunctionTool.from_defaults(fn=_file_ticket, name="open_ticket", description="File a ticket in the tracker."),
    FunctionTool.from_defaults(fn=_save_note, name="save_note", description="Keep a local triage note."),
]

agent = ReActAgent.from_tools(tools, llm=OpenAI(model="gpt-4o"), verbose=True)

if __name__ == "__main__":
    print(agent.chat("Triage acme/widgets#812 and file a ticket if it matches a known incident."))
