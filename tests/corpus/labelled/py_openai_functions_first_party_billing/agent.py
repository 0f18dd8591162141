"""Accounts-receivable agent against Acme's own billing API (function calling)."""
import json
import os
import sqlite3

import requests
from openai import OpenAI

BILLING_API = "https://api.internal.acme.example/v1/billing"
LEDGER_DB = "/srv/books/ledger.db"


def _auth() -> dict:
    return {"Authorization": f"Bearer {os.environ['ACME_TOKEN']}"}


def get_invoice(invoice_id: str) -> dict:
    resp = requests.get(f"{BILLING_API}/invoices/{invoice_id}", headers=_auth(), timeout=10)
    resp.raise_for_status()
    return resp.json()


def find_ledger_payment(amount_cents: int) -> list:
    with sqlite3.connect(LEDGER_DB) as conn:
        return conn.execute(
            "SELECT id, booked_on, payer FROM payments WHERE amount_cents = ? AND matched = 0",
            (amount_cents,),
        ).fetchall()


def mark_paid(invoice_id: str, payment_ref: str) -> str:
    resp = requests.patch(
        f"{BILLING_API}/invoices/{invoice_id}",
        json={"status": "paid", "payment_ref": payment_ref},
        headers=_auth(),
        timeout=10,
    )
    return "updated" if resp.ok else f"error {resp.status_code}"


TOOLS = [
    {"type": "function", "function": {
        "name": "get_invoice", "description": "Fetch an invoice from the billing API.",
        "parameters": {"type": "object", "properties": {"invoice_id": {"type": "string"}}, "required": ["invoice_id"]}}},
    {"type": "function", "function": {
        "name": "find_ledger_payment", "description": "Find unmatched ledger payments of an exact amount.",
        "parameters": {"type": "object", "properties": {"amount_cents": {"type": "integer"}}, "required": ["amount_cents"]}}},
    {"type": "function", "function": {
        "name": "mark_paid", "description": "Mark an invoice as paid in the billing API.",
        "parameters": {"type": "object", "properties": {"invoice_id": {"type": "string"}, "payment_ref": {"type": "string"}},
                       "required": ["invoice_id", "payment_ref"]}}},
]
FUNCTIONS = {"get_invoice": get_invoice, "find_ledger_payment": find_ledger_payment, "mark_paid": mark_paid}

if __name__ == "__main__":
    client = OpenAI()
    messages = [{"role": "system", "content": "Match open invoices with ledger payments."},
                {"role": "user", "content": "Reconcile invoices INV-1001 to INV-1005."}]
    while True:
        choice = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS).choices[0]
        messages.append(choice.message)
        if choice.finish_reason != "tool_calls":
            print(choice.message.content)
            break
        for call in choice.message.tool_calls:
            output = FUNCTIONS[call.function.name](**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(output, default=str)})
