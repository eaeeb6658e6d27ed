"""The LLM clients: one protocol every backend follows (:mod:`~memoryd.llm.completion`),
one retry loop within a deadline, and the backends themselves (docs/design.md#summarizers).

- :mod:`~memoryd.llm.anthropic`: the Messages API through the official SDK;
- :mod:`~memoryd.llm.openai_compat`: OpenAI-compatible servers (vLLM, llama.cpp's
  ``llama-server``, Ollama), streamed (:mod:`~memoryd.llm.openai_stream`,
  :mod:`~memoryd.llm.sse`);
- :mod:`~memoryd.llm.retries`, :mod:`~memoryd.llm.overflow`, :mod:`~memoryd.llm.limits`,
  :mod:`~memoryd.llm.crowding`: when to try again, context overflows, the contexts learned
  from servers, and one request at a time to a crowded server;
- :mod:`~memoryd.llm.client`, :mod:`~memoryd.llm.tls`: what a process keeps per
  backend (its SDK client, one TLS context).

May import: core, files, workspace, commit, published, receipts, config, stores, search,
transcript.
"""
