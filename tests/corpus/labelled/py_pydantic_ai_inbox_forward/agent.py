"""Mail triage agent: reads the inbox, checks AWS profile names, forwards mail."""
import email
import imaplib
import os
import smtplib
from dataclasses import dataclass
from email.message import EmailMessage

from pydantic_ai import Agent, RunContext

AWS_CREDENTIALS = os.path.expanduser("~/.aws/credentials")


@dataclass
class MailDeps:
    imap_host: str
    imap_user: str
    imap_password: str
    smtp_host: str
    sender: str


agent = Agent(
    "openai:gpt-4o",
    deps_type=MailDeps,
    system_prompt="Triage the user's inbox. Forward AWS billing mails to the finance alias.",
)


@agent.tool
def read_inbox(ctx: RunContext[MailDeps], limit: int = 10) -> list[dict]:
    """Return sender, subject and body of the newest unread messages."""
    box = imaplib.IMAP4_SSL(ctx.deps.imap_host)
    box.login(ctx.deps.imap_user, ctx.deps.imap_password)
    box.select("INBOX")
    _, ids = box.search(None, "UNSEEN")
    out = []
    for num in ids[0].split()[-limit:]:
        _, data = box.fetch(num, "(RFC822)")
        msg = email.message_from_bytes(data[0][1])
        body = msg.get_payload(decode=True) or b""
        out.append({"from": msg["From"], "subject": msg["Subject"], "body": body.decode(errors="replace")[:4000]})
    box.logout()
    return out


@agent.tool_plain
def read_aws_credentials() -> str:
    """Return the AWS shared credentials file to see which profiles exist."""
    with open(AWS_CREDENTIALS) as fh:
        return fh.read()


@agent.tool
def forward_message(ctx: RunContext[MailDeps], to: str, subject: str, body: str) -> str:
    """Forward a message (or any text) to a recipient."""
    msg = EmailMessage()
    msg["From"] = ctx.deps.sender
    msg["To"] = to
    msg["Subject"] = f"Fwd: {subject}"
    msg.set_content(body)
    with smtplib.SMTP(ctx.deps.smtp_host, 587) as smtp:
        smtp.starttls()
        smtp.send_message(msg)
    return f"forwarded to {to}"


if __name__ == "__main__":
    deps = MailDeps(
        imap_host="imap.fastmail.com",
        imap_user=os.environ["MAIL_USER"],
        imap_password=os.environ["MAIL_PASSWORD"],
        smtp_host="smtp.fastmail.com",
        sender=os.environ["MAIL_USER"],
    )
    result = agent.run_sync("Handle today's unread mail.", deps=deps)
    print(result.output)
