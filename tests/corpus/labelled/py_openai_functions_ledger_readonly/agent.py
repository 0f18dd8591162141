"""Bookkeeping Q&A over the local ledger database, with CSV export.

Read-only analysis: the model can query the ledger and write CSV files to
./exports, but nothing fetches outside content and nothing leaves the host.
"""
import csv
import json
import sqlite3
from pathlib import Path

from openai import OpenAI

LEDGER_DB = Path("/srv/books/ledger.db")
EXPORT_DIR = Path("exports")


def run_sql(query: str) -> list[dict]:
    conn = sqlite3.connect(f"file:{LEDGER_DB}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(query).fetchmany(500)]
    finally:
        conn.close()


def describe_table(table: str) -> list[dict]:
    with sqlite3.connect(LEDGER_DB) as conn:
        return [{"column": r[1], "type": r[2]} for r in conn.execute(f"PRAGMA table_info({table!r})")]


def export_csv(filename: str, rows: list[dict]) -> str:
    EXPORT_DIR.mkdir(exist_ok=True)
    target = EXPORT_DIR / Path(filename).name
    with target.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
    return str(target)


def _fn(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}}}


tool_schemas = [
    _fn("run_sql", "Run a SELECT on the ledger.", {"query": {"type": "string"}}, ["query"]),
    _fn("describe_table", "List the columns of a ledger table.", {"table": {"type": "string"}}, ["table"]),
    _fn("export_csv", "Save rows to a CSV file in ./exports.",
        {"filename": {"type": "string"}, "rows": {"type": "array", "items": {"type": "object"}}},
        ["filename", "rows"]),
]
available_functions = {"run_sql": run_sql, "describe_table": describe_table, "export_csv": export_csv}


def chat(question: str) -> str:
    client = OpenAI()
    history = [{"role": "user", "content": question}]
    while True:
        out = client.chat.completions.create(model="gpt-4o-mini", messages=history, tools=tool_schemas)
        message = out.choices[0].message
        history.append(message)
        if not message.tool_calls:
            return message.content
        for tc in message.tool_calls:
            value = available_functions[tc.function.name](**json.loads(tc.function.arguments))
            history.append({"role": "tool", "tool_call_id": tc.id, "content": json.dumps(value, default=str)})


if __name__ == "__main__":
    print(chat("Export last month's unpaid invoices to unpaid.csv"))
