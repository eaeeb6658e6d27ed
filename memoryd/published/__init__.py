"""What a workspace tells people and orchestrators: HEARTBEAT.md, ``.memoryd/state.json``,
``.memoryd/events.jsonl``, and the ContextMonitor an agent keeps of its own context
(docs/design.md#layout).

May import: core, files, workspace, commit.
"""
