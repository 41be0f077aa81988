"""An MCP stdio server that dies in the middle of a tool call: `python tests/agents/crashing_mcp_server.py`.

It starts and lists its tool like any server; calling `explode` ends the process at once (no reply,
no cleanup), the way a server that segfaults or is killed by the OOM killer would.
"""

import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("crashing")


@server.tool()
def explode() -> str:
    """Never answers: the process exits in the middle of the call."""
    print(f"explode called pid={os.getpid()}", file=sys.stderr, flush=True)
    os._exit(1)


if __name__ == "__main__":
    server.run()
