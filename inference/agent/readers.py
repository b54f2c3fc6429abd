"""Readers: turn (message text, question) into a reading.

A reading is what the scorer consumes for one (message, question) pair (docs/design.md §1,
docs/formats.md ``reading``): a probability per option of what the message *states*, plus
``unclear`` (about the question, but no answer can be told), ``unrelated`` (says nothing
about it), which together sum to 1, and ``one_off`` (the message describes a one-off,
not a lasting state). Whether the message is *true* is not the reader's business: that
is the source's trust, learned nightly.

An *open* question (its options are the values named so far: an address, a job) is read with
one more answer, ``unlisted`` ("a different answer, not listed"): ``read(…, open=True)`` returns
a reading whose ``probs + unlisted + unclear + unrelated`` sum to 1, with ``reader_version``
``prompt-2-open-2`` (:data:`OPEN_PROMPT_VERSION`); a closed question's prompt and version are
unchanged. A reader that reads open questions says so with ``reads_open = True`` (then its
``read_many`` takes (text, options, person, open) tuples).

Two ways in:

- :class:`OpenAIChatReader` asks any OpenAI-compatible chat-completions server with
  log-probabilities (llama.cpp ``llama-server``, vLLM, Ollama, hosted APIs) one lettered
  multiple-choice question and reads the probabilities off the first generated token.
  :func:`reader_from_env` builds one from ``DOXA_READER_URL`` / ``DOXA_READER_MODEL`` /
  ``DOXA_READER_KEY``.
- Readings made elsewhere are ingested as JSON Lines ``reading`` records with
  ``doxa ingest`` (which refuses a bad file whole, every bad line listed).

This module builds a reader from the environment and gathers the public names: the
reading and the interface are in :mod:`~doxa.inference.agent.reading`, the prompts and
the letter rule in :mod:`~doxa.inference.agent.reader_prompts`, the HTTP reader in
:mod:`~doxa.inference.agent.openai_reader`. Standard library only: this sits on the
path of ``doxa ask`` and must not pull in torch, pyro or pandas.
"""

from __future__ import annotations

from typing import Any, Mapping

from .openai_reader import OpenAIChatReader
from .reader_prompts import OPEN_PROMPT_VERSION, PROMPT_VERSION, letter_probabilities
from .reading import SUM_TOLERANCE, Reader, ReaderError, Reading, ReadingFormatError

__all__ = [
    "Reading",
    "Reader",
    "ReaderError",
    "ReadingFormatError",
    "OpenAIChatReader",
    "reader_from_env",
    "letter_probabilities",
    "SUM_TOLERANCE",
    "PROMPT_VERSION",
    "OPEN_PROMPT_VERSION",
]


def reader_from_env(env: Mapping[str, str] | None = None, **kwargs: Any) -> Reader | None:
    """The reader configured in the environment, or None when ``DOXA_READER_URL`` is unset.

    ``DOXA_READER_URL`` is the server's OpenAI base URL (``http://127.0.0.1:8080/v1``),
    ``DOXA_READER_MODEL`` the model name to send (optional for llama.cpp, which serves
    one), ``DOXA_READER_KEY`` an API key sent as a bearer token (optional),
    ``DOXA_READER_BATCH`` the most questions of one message asked in one prompt (optional,
    default 1: one at a time). Keyword arguments go to :class:`OpenAIChatReader` and
    override the environment (:meth:`OpenAIChatReader.from_env`).
    """
    return OpenAIChatReader.from_env(env, **kwargs)
