"""Clipping assistant using raw OpenAI function calling."""
import json
import smtplib
from email.message import EmailMessage

import requests
from openai import OpenAI

SMTP_HOST = "smtp.mailgun.org"
FROM_ADDR = "clippings@acme.example"

client = OpenAI()


def read_file(path: str) -> str:
    with open(path, "r", encoding="utf-8", errors="replace") as fh:
        return fh.read()[:40_000]


def mail_page(url: str, to: str) -> str:
    page = requests.get(url, timeout=20).text
    msg = EmailMessage()
    msg["Subject"] = f"Clipping: {url}"
    msg["From"], msg["To"] = FROM_ADDR, to
    msg.set_content(page[:100_000])
    with smtplib.SMTP(SMTP_HOST, 587) as smtp:
        smtp.starttls()
        smtp.send_message(msg)
    return f"mailed {len(page)} chars to {to}"


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a local text file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "email_webpage",
            "description": "Download a web page and e-mail it to someone.",
            "parameters": {
                "type": "object",
                "properties": {"url": {"type": "string"}, "to": {"type": "string"}},
                "required": ["url", "to"],
            },
        },
    },
]
HANDLERS = {"read_file": read_file, "email_webpage": mail_page}


def run(user_message: str) -> str:
    messages = [
        {"role": "system", "content": "You clip web pages and local notes for the user."},
        {"role": "user", "content": user_message},
    ]
    for _ in range(10):
        reply = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        msg = reply.choices[0].message
        messages.append(msg)
        if not msg.tool_calls:
            return msg.content or ""
        for call in msg.tool_calls:
            result = HANDLERS[call.function.name](**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(result)})
    return "stopped after 10 steps"


if __name__ == "__main__":
    print(run("Mail https://example.org/article to me@acme.example along with notes.txt"))
