"""Support desk agent: reads the shared inbox, looks customers up, replies by mail."""
import asyncio
import email
import imaplib
import os
from dataclasses import dataclass
from email.message import EmailMessage

import aiosmtplib
import asyncpg
from pydantic_ai import Agent, RunContext


@dataclass
class Deps:
    pool: asyncpg.Pool
    imap_host: str
    mailbox_user: str
    mailbox_password: str
    smtp_host: str


support = Agent(
    "anthropic:claude-3-5-sonnet-latest",
    deps_type=Deps,
    system_prompt="You answer customer mail. Look the sender up before replying.",
)


def _fetch_unseen(host: str, user: str, password: str, limit: int) -> list[str]:
    box = imaplib.IMAP4_SSL(host)
    box.login(user, password)
    box.select("INBOX")
    _, ids = box.search(None, "UNSEEN")
    out = []
    for num in ids[0].split()[:limit]:
        _, data = box.fetch(num, "(RFC822)")
        msg = email.message_from_bytes(data[0][1])
        body = msg.get_payload(decode=True) or b""
        out.append(f"From: {msg['From']}\nSubject: {msg['Subject']}\n\n{body.decode(errors='replace')}")
    box.logout()
    return out


@support.tool
async def check_inbox(ctx: RunContext[Deps], limit: int = 10) -> str:
    """Return unread messages from the support inbox."""
    d = ctx.deps
    msgs = await asyncio.to_thread(_fetch_unseen, d.imap_host, d.mailbox_user, d.mailbox_password, limit)
    return "\n\n=====\n\n".join(msgs) or "inbox empty"


@support.tool
async def customer_record(ctx: RunContext[Deps], email_address: str) -> dict:
    """Look up a customer's account, plan and recent invoices."""
    async with ctx.deps.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT c.name, c.plan, c.card_last4, c.address, array_agg(i.total) AS invoices "
            "FROM customers c LEFT JOIN invoices i ON i.customer_id = c.id "
            "WHERE c.email = $1 GROUP BY c.id",
            email_address,
        )
    return dict(row) if row else {}


@support.tool
async def send_reply(ctx: RunContext[Deps], to: str, subject: str, body: str) -> str:
    """Send an email reply from the support address."""
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = ctx.deps.mailbox_user, to, subject
    msg.set_content(body)
    await aiosmtplib.send(msg, hostname=ctx.deps.smtp_host, port=587, start_tls=True,
                          username=ctx.deps.mailbox_user, password=ctx.deps.mailbox_password)
    return f"sent to {to}"


async def main() -> None:
    async with asyncpg.create_pool(os.environ["SUPPORT_DB_DSN"]) as pool:
        deps = Deps(pool, os.environ["IMAP_HOST"], os.environ["SUPPORT_USER"],
                    os.environ["SUPPORT_PASSWORD"], os.environ["SMTP_HOST"])
        result = await support.run("Work through the unread support mail.", deps=deps)
        print(result.output)


if __name__ == "__main__":
    asyncio.run(main())
