"""Evaluation, out of the product path: the synthetic world, the baselines, the benchmark, information measures.

Nothing in the read path, learning, agent features or data/ imports this package
(tests/test_architecture.py checks it); the `doxa bench` command and the tests do.
"""
