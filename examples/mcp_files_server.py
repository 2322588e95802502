"""A local MCP server over stdio (the ``mcp`` package) with one tool, for recorder tests."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("files")


@server.tool()
def delete_file(path: str) -> str:
    """Delete a file (pretend)."""
    return f"deleted {path}"


if __name__ == "__main__":
    server.run()
