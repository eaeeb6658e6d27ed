"""``memoryd mcp``: recall, expand, context status, the API view and the memory stores as
MCP tools for agents, on the official MCP SDK (docs/design.md#mcp-server).

- :mod:`~memoryd.mcp_server.server`: the tools;
- :mod:`~memoryd.mcp_server.tools`: what it adds to the SDK's server (one-line errors).

May import: core, files, workspace, commit, signals, receipts, config, stores, recall,
summarizers, strategies, job, daemon, status.
"""
