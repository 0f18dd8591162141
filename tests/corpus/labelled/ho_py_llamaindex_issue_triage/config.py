"""Runtime settings for the triage agent, all environment driven."""
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TriageSettings:
    github_api: str = os.getenv("GITHUB_API_URL", "https://api.github.com")
    github_token: str = os.getenv("GITHUB_TOKEN", "")
    tracker_url: str = os.getenv("TRACKER_URL", "https://tracker.internal.example.com")
    tracker_key: str = os.getenv("TRACKER_API_KEY", "")
    incidents_db: Path = Path(os.getenv("INCIDENTS_DB", "/var/lib/oncall/incidents.db"))
    notes_dir: Path = Path(os.getenv("TRIAGE_NOTES", "./triage-notes"))


SETTINGS = TriageSettings()
