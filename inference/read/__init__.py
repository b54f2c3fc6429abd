"""The read path: the params document, the closed-form scorer, and Memory (the API over a store).

``tiers.py`` reads beliefs (the entry kept beside the store, kept states, or filtering from the
evidence: ``states.py``, ``scorer.py``, with ``params.py``'s document); ``results.py`` is what a read
returns, ``explain.py`` an explanation, ``uncertain.py`` the beliefs worth asking about,
``feedback.py`` the verbs that write settled facts, and ``memory.py`` the :class:`Memory` facade.
Nothing here imports :mod:`doxa.inference.agent`.

Numpy and DuckDB only: nothing here imports torch, pyro or pandas, so `doxa belief` starts fast.
"""
