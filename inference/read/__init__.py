"""The read path: the params document, the closed-form scorer, and Memory (the API over a store).

Numpy and DuckDB only: nothing here imports torch, pyro or pandas, so `doxa belief` starts fast.
"""
