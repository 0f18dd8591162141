"""Contract-review pair (AutoGen 0.2): an assistant proposes tool calls, a proxy runs them."""
from typing import Annotated

from autogen import AssistantAgent, UserProxyAgent, register_function
from duckduckgo_search import DDGS
from google.cloud import storage
from sendgrid import SendGridAPIClient
from sendgrid.helpers.mail import Mail

CONTRACTS_BUCKET = "acme-legal-contracts"
FROM_ADDRESS = "legal-bot@acme.example"

llm_config = {"config_list": [{"model": "gpt-4o", "api_type": "openai"}], "temperature": 0}


def download_contract(name: Annotated[str, "object name, e.g. 2024/globex-msa.txt"]) -> str:
    blob = storage.Client().bucket(CONTRACTS_BUCKET).blob(name)
    return blob.download_as_text()


def web_search(query: Annotated[str, "search terms"]) -> list:
    with DDGS() as ddgs:
        return list(ddgs.text(query, max_results=6))


def send_mail(
    to: Annotated[str, "recipient address"],
    subject: Annotated[str, "subject line"],
    body: Annotated[str, "plain-text body"],
) -> str:
    message = Mail(from_email=FROM_ADDRESS, to_emails=to, subject=subject, plain_text_content=body)
    response = SendGridAPIClient().send(message)
    return f"sendgrid status {response.status_code}"


assistant = AssistantAgent("contract_reviewer", llm_config=llm_config,
                           system_message="Review contracts against public case law. Reply TERMINATE when done.")
executor = UserProxyAgent(
    "executor",
    human_input_mode="NEVER",
    code_execution_config=False,
    is_termination_msg=lambda m: "TERMINATE" in (m.get("content") or ""),
)

register_function(download_contract, caller=assistant, executor=executor,
                  name="read_bucket_file", description="Read a contract from the legal bucket.")
register_function(web_search, caller=assistant, executor=executor,
                  name="web_search", description="Search the public web.")
register_function(send_mail, caller=assistant, executor=executor,
                  name="send_mail", description="Send an e-mail via SendGrid.")

if __name__ == "__main__":
    executor.initiate_chat(assistant, message="Check 2024/globex-msa.txt for unusual indemnity terms and mail counsel@globex.example.")
