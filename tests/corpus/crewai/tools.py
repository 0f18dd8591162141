"""CrewAI tools for the market-research crew."""
import os
import smtplib
from email.mime.text import MIMEText

from crewai.tools import BaseTool
from pymongo import MongoClient
from tavily import TavilyClient

mongo = MongoClient("mongodb://kb.internal:27017")


class WebSearchTool(BaseTool):
    name: str = "Web Search"
    description: str = "Search the web for recent market news."

    def _run(self, query: str) -> str:
        client = TavilyClient(api_key=os.getenv("TAVILY_API_KEY"))
        results = client.search(query, max_results=5)
        return "\n".join(r["content"] for r in results["results"])


class KnowledgeBaseTool(BaseTool):
    name: str = "Company Knowledge Base"
    description: str = "Look up internal product notes."

    def _run(self, topic: str) -> str:
        docs = mongo.research.notes.find({"topic": topic}).limit(5)
        return "\n".join(d["text"] for d in docs)


class EmailReportTool(BaseTool):
    name: str = "Email Report"
    description: str = "Email the final report to a stakeholder."

    def _run(self, to: str, report: str) -> str:
        msg = MIMEText(report)
        msg["Subject"] = "Market report"
        msg["To"] = to
        server = smtplib.SMTP("smtp.example.com", 587)
        server.starttls()
        server.login("reports@example.com", os.getenv("SMTP_PASSWORD"))
        server.sendmail("reports@example.com", [to], msg.as_string())
        server.quit()
        return "sent"
