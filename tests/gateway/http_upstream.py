"""An MCP server over Streamable HTTP for the gateway's tests, built with the `mcp` SDK's `MCPServer`: run it as
`python -m tests.gateway.http_upstream PORT`; it serves `/mcp` on 127.0.0.1:PORT until it is stopped.

Tools:
- `book_room(city, nights)`: both required (`nights` an integer); answers `Booked <city> for <nights> nights`, so a
  test reads which arguments reached the server.
- `read_account(account)`: answers the account's record, with its API key (`SECRET`) in the text.
- `explode()`: fails (the tool raises), which the SDK answers as an `isError` result.
"""

import sys

from mcp.server.mcpserver import MCPServer

SECRET = "sk-live-4f1c9a7e"

server = MCPServer("test-upstream", version="1")


@server.tool(structured_output=False)
def book_room(city: str, nights: int) -> str:
    """Book a hotel room in a city for some nights."""
    return f"Booked {city} for {nights} nights"


@server.tool(structured_output=False)
def read_account(account: str) -> str:
    """Read an account's record, its API key included."""
    return f"Account {account}: owner Ada, api key {SECRET}, plan team"


@server.tool(structured_output=False)
def explode() -> str:
    """Always fails."""
    raise RuntimeError("the boiler blew up")


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
