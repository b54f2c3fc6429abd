"""Agent features over the read path: context for a task, ask (read a store with an LLM reader), the readers."""
