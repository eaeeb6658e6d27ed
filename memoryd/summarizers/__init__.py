"""Summarizer backends (Anthropic, extractive) and the prompts they send."""
