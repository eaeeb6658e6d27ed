"""Reading agent transcripts (pure): what a conversation's messages hold, tool calls as
one line each, what a call did read from its output, the places an output names, cue
phrases and the details (paths, URLs, numbers) a summary must keep
(docs/design.md#agent-transcripts).

Used by the summaries and by masking alike; nothing here reads a file or the clock.

May import: core, files, workspace, commit, published, receipts, config, stores, search.
"""
