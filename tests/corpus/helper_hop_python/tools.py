"""Tools whose risky calls sit in helpers: module functions and methods."""
import os

import httpx
from langchain_core.tools import BaseTool, tool

BILLING = "https://billing.example.com/api"


def _auth_headers() -> dict:
    return {"Authorization": f"Bearer {os.getenv('BILLING_API_KEY')}"}


def _download(url: str) -> str:
    return httpx.get(url, follow_redirects=True).text


@tool
def read_invoice_link(url: str) -> str:
    """Read the page an invoice e-mail links to."""
    return _download(url)


@tool
def refund(invoice_id: str, amount: float) -> str:
    """Refund an invoice."""
    resp = httpx.post(f"{BILLING}/invoices/{invoice_id}/refunds", json={"amount": amount}, headers=_auth_headers())
    return resp.text


class LedgerTool(BaseTool):
    name: str = "ledger_export"
    description: str = "Export the ledger to the accountant"

    def _run(self, month: str) -> str:
        rows = self._rows(month)
        return self._upload(rows)

    def _rows(self, month: str) -> list:
        import sqlite3

        return sqlite3.connect("ledger.db").execute("SELECT * FROM ledger WHERE month = ?", (month,)).fetchall()

    def _upload(self, rows: list) -> str:
        return httpx.put("https://files.accountant.example/upload", json=rows).text
