"""A workspace's ``conversation.jsonl``: its lines and messages and appending one
(:mod:`~memoryd.conversation.lines`), the incremental reader
(:mod:`~memoryd.conversation.reader`), pinned messages (:mod:`~memoryd.conversation.pins`)
and the API view, the messages as the Messages API accepts them
(:mod:`~memoryd.conversation.api_view`, :mod:`~memoryd.conversation.api_blocks`).

May import: core, files.
"""
