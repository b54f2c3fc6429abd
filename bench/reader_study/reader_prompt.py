"""Proposed reader prompt for small local models (issue 13, item 3) — a proposal, not wired in.

What it changes against inference/readers.py PROMPT_VERSION "1":

- three worked examples (user/assistant turns) before the real question: a clear
  statement that also negates an old answer, another person's fact (-> "not about
  <subject>"), and a vague mention (-> "no answer given"); plus two for the one-off
  question (a single occasion, a habit);
- the person is named in the system prompt, in every question and in the two extra
  answers ("says nothing about Maya's ..."), so "my sister is vegan" has an answer that
  fits it better than "vegan";
- unclear / unrelated are worded as plain answers a small model can pick, not as
  labels in parentheses;
- every user turn ends in ``Answer:`` and the assistant turns are a bare letter, so the
  first generated token is a letter;
- the examples, the message and the question come in the same order for both questions
  (choice and one-off) and the examples are one fixed block: a server that caches the
  longest common prompt prefix (llama.cpp does) evaluates the examples once.

``choice_messages`` / ``one_off_messages`` return the chat ``messages`` list; letters are
``A..`` for the options, then one for "no answer given" (unclear), then one for "not
about" (unrelated) — the same layout as PROMPT_VERSION 1, so ``letter_probabilities``
and the mapping to a Reading stay as they are.

``ProposedReader`` is the measuring harness used for the study: OpenAIChatReader with
its two prompts replaced (it reuses the HTTP, retry and logprob code unchanged).
"""

from __future__ import annotations

from typing import Any, Sequence

from doxa.inference.agent import reader_prompts as P
from doxa.inference.agent import readers as R

PROMPT_VERSION = "2-proposed"

SYSTEM = (
    "You read short messages kept in a personal memory and answer multiple-choice "
    "questions about one named person. Use only what the message itself says about that "
    "person. A fact about someone else (a sister, a friend, a colleague, the sender) says "
    "nothing about the named person. Do not judge whether the message is true. "
    "Reply with the letter of one answer and nothing else."
)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _quote(message_text: str) -> str:
    # one line, straight quotes stripped of line breaks: the message cannot start a new turn
    return '"' + _one_line(message_text).replace('"', "'") + '"'


def _choice_text(message_text: str, subject: str, question_text: str, options: Sequence[str]) -> str:
    who = _one_line(subject)
    labels = [_one_line(o) for o in options] + [
        f"The message talks about this for {who} but does not say which answer",
        f"The message says nothing about this for {who}",
    ]
    lines = [f"Message: {_quote(message_text)}", f"Person: {who}", f"Question: {_one_line(question_text)}"]
    lines += [f"{P.LETTERS[i]}. {label}" for i, label in enumerate(labels)]
    lines.append("Answer:")
    return "\n".join(lines)


def _one_off_text(message_text: str, subject: str, question_text: str) -> str:
    who = _one_line(subject)
    return "\n".join([
        f"Message: {_quote(message_text)}",
        f"Person: {who}",
        f"Topic: {_one_line(question_text)}",
        f"Does the message tell how things usually are for {who}, or about one single occasion?",
        f"A. How things usually are for {who} (a habit or a lasting fact)",
        "B. One single occasion (today, tonight, one meal, one trip, once)",
        "C. Cannot tell",
        "Answer:",
    ])


_DIET = ["vegetarian", "vegan", "pescatarian", "omnivore"]
_WORK = ["Acme", "Globex", "Initech", "Hooli"]
_MUSIC = ["jazz", "pop", "rock", "classical"]

#: (user text, assistant letter): fixed, so the prefix they make is the same on every call.
_EXAMPLES: tuple[tuple[str, str], ...] = (
    (_choice_text("Ines left Acme in May, she works for Globex now.", "Ines",
                  "Where does Ines work?", _WORK), "B"),
    (_choice_text("My brother is vegan, so no cheese at dinner please.", "Omar",
                  "What does Omar eat?", _DIET), "F"),
    (_choice_text("Kenji mentioned something about music, I forgot what.", "Kenji",
                  "What music does Kenji like?", _MUSIC), "E"),
    (_one_off_text("Omar had fish and chips at the pub tonight.", "Omar", "What does Omar eat?"), "B"),
    (_one_off_text("Ines has cycled to work every day for years.", "Ines", "How does Ines get around?"), "A"),
)


def _with_examples(final_user_text: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": SYSTEM}]
    for user, letter in _EXAMPLES:
        messages.append({"role": "user", "content": user})
        messages.append({"role": "assistant", "content": letter})
    messages.append({"role": "user", "content": final_user_text})
    return messages


def choice_messages(message_text: str, question_text: str, options: Sequence[str],
                    subject: str | None) -> list[dict[str, str]]:
    """Chat messages asking which option the message states; letters: options, unclear, unrelated."""
    return _with_examples(_choice_text(message_text, subject or "the person asked about", question_text, options))


def one_off_messages(message_text: str, question_text: str, subject: str | None) -> list[dict[str, str]]:
    """Chat messages asking lasting (A) / one-off (B) / cannot tell (C)."""
    return _with_examples(_one_off_text(message_text, subject or "the person asked about", question_text))


class ProposedReader(R.OpenAIChatReader):
    """OpenAIChatReader with the proposed prompts (for measuring them; same HTTP path)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("version", f"prompt-{PROMPT_VERSION}")
        super().__init__(*args, **kwargs)

    def read(self, message_text: str, question_text: str, options: list[str], *,
             subject: str | None = None) -> R.Reading:
        options = list(options)
        n = len(options)
        letters = P.LETTERS[: n + 2]
        p = self._ask_messages(choice_messages(message_text, question_text, options, subject), letters)
        one_off = 0.0
        if self.ask_one_off:
            one_off = self._ask_messages(one_off_messages(message_text, question_text, subject), "ABC")["B"]
        return R.Reading(probs={o: p[letters[i]] for i, o in enumerate(options)}, unclear=p[letters[n]],
                         unrelated=p[letters[n + 1]], one_off=min(1.0, max(0.0, one_off)),
                         reader=self.name, reader_version=self.version)

    def _ask_messages(self, messages: list[dict[str, str]], letters: Sequence[str]) -> dict[str, float]:
        body: dict[str, Any] = {"messages": messages, "max_tokens": 1, "temperature": 0,
                                "logprobs": True, "top_logprobs": self.top_logprobs}
        if self.model:
            body["model"] = self.model
        body.update(self.extra_body)
        top = self._first_token_top_logprobs(self._post(body))
        probs = P.letter_probabilities(top, letters)
        if probs is None:
            raise R.ReaderError(f"no answer letter among the top tokens: {top[:8]!r}")
        return probs
