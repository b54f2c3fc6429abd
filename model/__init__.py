"""The generative story: ``belief_model.py`` (the Pyro model, its math in the docstring) and its machinery beside it."""
