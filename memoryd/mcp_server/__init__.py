"""``memoryd mcp``: recall, expand, context status, the API view and the memory stores as
MCP tools for agents, on the official MCP SDK (docs/design.md#mcp-server).

- :mod:`~memoryd.mcp_server.server`: the tools;
- :mod:`~memoryd.mcp_server.tools`: what it adds to the SDK's server (one-line errors).

May import: core, files, workspace, commit, published, receipts, config, stores, search,
transcript, llm, summary, compaction, daemon, status.
"""
