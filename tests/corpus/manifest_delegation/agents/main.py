"""The account-manager agent: answers customers, may email them."""
import re
import smtplib
from email.message import EmailMessage

from langchain_core.tools import tool

EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")


@tool
def redact(text: str) -> str:
    """Remove e-mail addresses from a text."""
    return EMAIL.sub("[redacted]", text)


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an e-mail to a customer."""
    msg = EmailMessage()
    msg["To"], msg["Subject"] = to, subject
    msg.set_content(body)
    with smtplib.SMTP("smtp.example.com", 587) as smtp:
        smtp.send_message(msg)
    return "sent"
