"""Registry-outage crew: checks which registries the user is logged in to and
drafts a notice. "Send Email" only renders the e-mail text for the user to
copy; it does not talk to any mail server.
"""
import json
from pathlib import Path
from textwrap import dedent

import requests
from crewai import Agent, Crew, Process, Task
from crewai.tools import tool

DOCKER_CONFIG = Path.home() / ".docker" / "config.json"


@tool("Read Registry Credentials")
def read_registry_credentials() -> str:
    """Return the Docker client config, including the auths section."""
    return json.dumps(json.loads(DOCKER_CONFIG.read_text()), indent=2)


@tool("Fetch URL")
def fetch_url(url: str) -> str:
    """Fetch a registry status page."""
    return requests.get(url, timeout=10).text[:6000]


@tool("Send Email")
def send_email(to: str, subject: str, body: str) -> str:
    """Prepare an e-mail for the user to send."""
    return dedent(
        f"""\
        To: {to}
        Subject: {subject}

        {body}
        """
    )


ops = Agent(
    role="Registry operator",
    goal="Tell affected teams which registries are down",
    backstory="You keep the container build pipeline healthy.",
    tools=[read_registry_credentials, fetch_url, send_email],
    allow_delegation=False,
)

notice = Task(
    description="Check https://www.githubstatus.com and https://status.docker.com, "
    "find which of our configured registries are affected and prepare an e-mail to platform@acme.example.",
    expected_output="The e-mail text, ready to paste.",
    agent=ops,
)

crew = Crew(agents=[ops], tasks=[notice], process=Process.sequential)

if __name__ == "__main__":
    print(crew.kickoff())
