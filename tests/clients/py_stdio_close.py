"""A stdio client of the official Python SDK that asks for the tools and closes at once, as
langchain-mcp-adapters' get_tools() does. SDK 1.x fails the whole session on a message that
arrives while it closes (python-sdk#1960), so this ends cleanly only if the server sends
nothing unasked after the answer.

    py_stdio_close.py COMMAND [ARG...]
"""

import asyncio
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(command: str, args: list[str]) -> None:
    params = StdioServerParameters(command=command, args=args)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
    print(f"{len(tools)} tools, closed cleanly")


asyncio.run(main(sys.argv[1], sys.argv[2:]))
