"""The Memory a program opens with :func:`doxa.open`: the read path's Memory plus the verbs that take raw messages.

:class:`doxa.inference.read.memory.Memory` reads beliefs, explains them and records feedback;
it needs numpy and DuckDB only. Turning a raw message into evidence (:meth:`AgentMemory.remember`,
:meth:`AgentMemory.organize`) and a question in words into an answer (:meth:`AgentMemory.answer`) need
the organizer and the reader, the model clients of this layer. Imports run one way, agent → read (tests/test_architecture.py), so those two verbs are
added here, by a subclass, rather than written in read/ as calls up a layer.

:func:`doxa.open` returns an :class:`AgentMemory`, so ``mem.remember(...)`` works on every store
a program opens. The model code is imported at the first call of either verb, not here: a
program that only reads beliefs starts as fast as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from doxa.inference.read.memory import Memory

if TYPE_CHECKING:
    from .answer import AnswerResult
    from .conversation import ConversationResult
    from .remember import RememberResult


class AgentMemory(Memory):
    """A :class:`~doxa.inference.read.memory.Memory` that also remembers raw messages. Create with :func:`doxa.open`."""

    def remember(self, text: str, *, source: str, sent_at=None, **kwargs) -> "RememberResult":
        """Keep a raw message, have the organizer and the reader do their part, return the beliefs it moved.

        See :func:`doxa.inference.agent.remember.remember` (``organizer=``, ``reader=``, ``keep_on_failure=``)."""
        from .remember import remember

        return remember(self, text, source=source, sent_at=sent_at, **kwargs)

    def organize(self, **kwargs) -> "list[RememberResult]":
        """Finish the messages `remember` kept pending (see :func:`doxa.inference.agent.remember.organize_pending`)."""
        from .remember import organize_pending

        return organize_pending(self, **kwargs)

    def remember_conversation(self, sessions, *, keep_only: bool = False, organizer=None, reader=None, progress=None,
                              **kwargs) -> "ConversationResult":
        """Keep a conversation's turns (a file, or :class:`~doxa.inference.agent.conversation.Session` objects)
        and, unless ``keep_only``, organize the user's turns a window at a time and read them.

        See :func:`doxa.inference.agent.conversation.remember_conversation` (``window=``, ``use_env=``)."""
        from .conversation import remember_conversation

        return remember_conversation(self, sessions, keep_only=keep_only, organizer=organizer, reader=reader,
                                     progress=progress, **kwargs)

    def answer(self, question: str, *, subject: str | None = None, at=None, **kwargs) -> "AnswerResult":
        """Answer a question in words: find (or create) the tracked question it asks, return the top answer,
        its probability, act or abstain, the alternatives and the evidence.

        See :func:`doxa.inference.agent.answer.answer` (``act_at=``, ``reader=``, ``model=``, ``use_env=``)."""
        from .answer import answer

        return answer(self, question, subject=subject, at=_moment(at), **kwargs)


def _moment(at):
    """``at`` as a datetime (an ISO 8601 string, a date or a datetime), None for now."""
    from doxa.data.times import as_moment

    return as_moment(at)


__all__ = ["AgentMemory"]
