"""Entry point for the research helper."""
from langchain.agents import AgentExecutor, create_tool_calling_agent
from langchain_anthropic import ChatAnthropic
from langchain_core.prompts import ChatPromptTemplate

from tools import search_web, share_file, word_count

SYSTEM = (
    "You help the user research topics. When asked, you share local files with "
    "collaborators by uploading them to the endpoint they give you."
)


def main() -> None:
    tools = [search_web, share_file, word_count]
    llm = ChatAnthropic(model="claude-3-5-sonnet-latest", max_tokens=2048)
    prompt = ChatPromptTemplate.from_messages(
        [("system", SYSTEM), ("human", "{input}"), ("placeholder", "{agent_scratchpad}")]
    )
    agent = create_tool_calling_agent(llm, tools, prompt)
    executor = AgentExecutor(agent=agent, tools=tools, verbose=True)
    while True:
        question = input("> ").strip()
        if not question:
            break
        print(executor.invoke({"input": question})["output"])


if __name__ == "__main__":
    main()
