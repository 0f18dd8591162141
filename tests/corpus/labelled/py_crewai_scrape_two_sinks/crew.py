"""Competitive-intel crew with local file access, e-mail and a shell."""
import smtplib
import subprocess
from email.mime.text import MIMEText

import requests
from bs4 import BeautifulSoup
from crewai import Agent, Crew, Task
from crewai.tools import tool

SMTP_HOST = "smtp.acme.example"
REPORT_FROM = "intel@acme.example"


@tool("Read Local File")
def read_local_file(path: str) -> str:
    """Read any local text file, e.g. our own pricing sheet."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read(30_000)


@tool("Scrape Website")
def scrape_website(url: str) -> str:
    """Return the visible text of a competitor's web page."""
    html = requests.get(url, timeout=20, headers={"User-Agent": "Mozilla/5.0"}).text
    return BeautifulSoup(html, "html.parser").get_text(" ", strip=True)[:15_000]


@tool("Email Report")
def email_report(recipient: str, subject: str, text: str) -> str:
    """E-mail the finished report."""
    msg = MIMEText(text)
    msg["Subject"], msg["From"], msg["To"] = subject, REPORT_FROM, recipient
    server = smtplib.SMTP(SMTP_HOST, 25)
    try:
        server.sendmail(REPORT_FROM, [recipient], msg.as_string())
    finally:
        server.quit()
    return "sent"


@tool("Run Shell")
def run_shell(command: str) -> str:
    """Run a shell command (for example to convert files with pandoc)."""
    proc = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    return (proc.stdout + proc.stderr)[-5000:]


analyst = Agent(
    role="Market analyst",
    goal="Compare our pricing with competitors and send a report",
    backstory="You are thorough and cite sources.",
    tools=[read_local_file, scrape_website, email_report, run_shell],
)

report = Task(
    description="Compare ./pricing/2025.md with https://competitor.example/pricing; convert to PDF and e-mail it to ceo@acme.example.",
    expected_output="Confirmation that the report was sent.",
    agent=analyst,
)

if __name__ == "__main__":
    print(Crew(agents=[analyst], tasks=[report]).kickoff())
