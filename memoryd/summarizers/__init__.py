"""Summarizer backends (Anthropic, OpenAI-compatible, extractive) and the prompts they send.

May import: core, files, workspace, commit, signals, receipts, config, stores, recall.
"""
