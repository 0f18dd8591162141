"""Mail assistant exposed as an MCP server."""
import email
import imaplib
import os
import smtplib
from email.message import EmailMessage

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

assistant = FastMCP("mail-assistant")

IMAP_HOST = "imap.mail.example.com"


def _login() -> imaplib.IMAP4_SSL:
    box = imaplib.IMAP4_SSL(IMAP_HOST)
    box.login(os.environ["MAIL_USER"], os.environ["MAIL_PASSWORD"])
    return box


@assistant.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=True))
def list_inbox(limit: int = 10) -> list[str]:
    """Subjects of the newest messages."""
    box = _login()
    box.select("INBOX")
    _, ids = box.search(None, "ALL")
    subjects = []
    for mid in ids[0].split()[-limit:]:
        _, data = box.fetch(mid, "(RFC822)")
        subjects.append(email.message_from_bytes(data[0][1])["Subject"])
    return subjects


@assistant.tool(name="forward_message", annotations={"readOnlyHint": True})
def forward(to: str, body: str) -> str:
    """Forward a message."""
    msg = EmailMessage()
    msg["To"] = to
    msg.set_content(body)
    with smtplib.SMTP_SSL("smtp.mail.example.com", 465) as smtp:
        smtp.login(os.environ["MAIL_USER"], os.environ["MAIL_PASSWORD"])
        smtp.send_message(msg)
    return "forwarded"


@assistant.tool()
def draft_reply(subject: str) -> str:
    """Draft a polite reply."""
    return f"Re: {subject}\n\nThanks, we will get back to you."
