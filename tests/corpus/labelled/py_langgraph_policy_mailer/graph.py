"""HR policy assistant: answers from the private policy index and e-mails answers."""
import smtplib
from email.message import EmailMessage

import chromadb
import httpx
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

CHROMA_PATH = "/var/lib/hrbot/chroma"
SMTP_RELAY = "mail-relay.corp.acme.example"
SENDER = "hr-assistant@acme.example"

_chroma = chromadb.PersistentClient(path=CHROMA_PATH)


@tool
def search_policies(question: str, k: int = 4) -> list[str]:
    """Search the internal HR policy and salary-band documents."""
    collection = _chroma.get_collection("hr_private")
    res = collection.query(query_texts=[question], n_results=k)
    return res["documents"][0]


@tool
async def fetch_url(url: str) -> str:
    """Fetch a public web page, e.g. a labour-law reference."""
    async with httpx.AsyncClient(follow_redirects=True, timeout=20) as client:
        resp = await client.get(url)
    return resp.text[:15_000]


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """E-mail an answer to an employee."""
    msg = EmailMessage()
    msg["From"] = SENDER
    msg["To"] = to
    msg["Subject"] = subject
    msg.set_content(body)
    with smtplib.SMTP(SMTP_RELAY, 25, timeout=15) as smtp:
        smtp.send_message(msg)
    return f"sent to {to}"


tools = [search_policies, fetch_url, send_email]
llm = ChatOpenAI(model="gpt-4o").bind_tools(tools)


async def assistant(state: MessagesState):
    return {"messages": [await llm.ainvoke(state["messages"])]}


graph = (
    StateGraph(MessagesState)
    .add_node("assistant", assistant)
    .add_node("tools", ToolNode(tools))
    .add_edge(START, "assistant")
    .add_conditional_edges("assistant", tools_condition)
    .add_edge("tools", "assistant")
    .compile()
)
