"""doxa: a belief memory for agents that says how sure it is.

``doxa.open(path)`` returns a :class:`doxa.inference.agent.memory.AgentMemory`: the read path's
:class:`doxa.inference.read.memory.Memory` (ingest, beliefs, explanations, feedback) plus ``remember``
and ``organize`` for raw messages. The store is :mod:`doxa.data.store`; the scorer :mod:`doxa.inference.read.scorer`. Nothing here imports torch, pyro or pandas: reads stay fast.
"""

__version__ = "0.1.0"


def open(path=None, **kwargs):  # noqa: A001 - mirrors sqlite-utils' Database()
    """Open (creating if needed) a doxa store as a :class:`doxa.inference.agent.memory.AgentMemory`.

    ``None`` means ``$DOXA_DB`` or ./doxa.duckdb; ``":memory:"`` keeps nothing on disk.
    """
    from doxa.inference.agent.memory import AgentMemory  # lazy: `import doxa` stays cheap

    return AgentMemory.open(path, **kwargs)
