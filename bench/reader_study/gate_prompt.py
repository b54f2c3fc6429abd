"""A candidate reader prompt in two steps, for small models that never answer "unrelated".

Prompt 2 (``doxa.inference.agent.reader_prompts``) asks one lettered question whose last two
answers are *unclear* and *unrelated*; a 1.5B model picks a stated option for a message
about someone else ("My sister is vegan" read for Maya: vegan 0.77). Here the reader first
asks a gate question — does the message give the answer for this person, mention it without
giving it, or is it about someone or something else — and then the options alone, with the
lasting / one-off digit. The reading combines them:

    P(option i) = P(gives it) · q_i,   unclear = P(mentions it),   unrelated = P(someone/something else)

Two calls per (message, question) instead of one: measured against prompt 2 on the hand
cases with ``prompt_study.py --prompts current,gate``.
"""

from __future__ import annotations

from typing import Any, Sequence

from doxa.inference.agent import openai_reader as R
from doxa.inference.agent.reader_prompts import LETTERS, _conversation, _one_line, _quoted
from doxa.inference.agent.readers import Reading

GATE_SYSTEM = ("You read short messages kept in a personal memory. For one named person and one topic, say "
               "whether the message gives the answer for that person. A fact about someone else (a sister, a "
               "friend, a colleague, the sender) does not give the answer for the named person. Reply with one "
               "letter.")
OPTIONS_SYSTEM = ("You read short messages kept in a personal memory and answer multiple-choice questions about "
                  "one named person. Reply with the letter of one answer, a space, then 1 if what the message says "
                  "holds over time (a habit or a lasting fact) or 2 if it is about one single occasion.")


def gate_text(message_text: str, question_text: str, who: str) -> str:
    return "\n".join([
        f"Message: {_quoted(message_text)}", f"Person: {who}", f"Topic: {_one_line(question_text)}",
        f"Does the message give the answer for {who}?",
        f"A. Yes: it says the answer for {who}",
        f"B. It is about this for {who} but does not say the answer",
        f"C. No: it is about someone other than {who}, or about something else",
        "Answer:"])


def options_text(message_text: str, question_text: str, options: Sequence[str], who: str) -> str:
    lines = [f"Message: {_quoted(message_text)}", f"Person: {who}", f"Question: {_one_line(question_text)}"]
    lines += [f"{LETTERS[i]}. {_one_line(o)}" for i, o in enumerate(options)]
    return "\n".join(lines + ["Answer:"])


_DIET = ("vegetarian", "vegan", "pescatarian", "omnivore")
_WORK = ("Acme", "Globex", "Initech", "Hooli")
GATE_EXAMPLES = (
    (gate_text("Ines left Acme in May, she works for Globex now.", "Where does Ines work?", "Ines"), "A"),
    (gate_text("My brother is vegan, so no cheese at dinner please.", "What does Omar eat?", "Omar"), "C"),
    (gate_text("Kenji mentioned something about music, I forgot what.", "What music does Kenji like?", "Kenji"), "B"),
    (gate_text("Omar's train gets in at six tonight.", "What does Omar eat?", "Omar"), "C"),
    (gate_text("Omar had a big steak at the pub tonight.", "What does Omar eat?", "Omar"), "A"),
)
OPTIONS_EXAMPLES = (
    (options_text("Ines left Acme in May, she works for Globex now.", "Where does Ines work?", _WORK, "Ines"), "B 1"),
    (options_text("Omar had a big steak at the pub tonight.", "What does Omar eat?", _DIET, "Omar"), "D 2"),
)


def letters_and_one_off(reader: R.OpenAIChatReader, messages: list[dict[str, str]],
                        letters: Sequence[str]) -> tuple[dict[str, float], float]:
    """One call: the probability of each answer letter, and of "one single occasion" from the digit after it."""
    tokens = reader._ask(messages, R.REPLY_TOKENS if reader.ask_one_off else 1)
    digits = R._digit_probabilities(tokens[1:]) if reader.ask_one_off else None
    return reader._letters(tokens[0], letters), min(1.0, max(0.0, digits or 0.0))


class GateReader(R.OpenAIChatReader):
    """Prompt 2's reader with the gate question asked first (two calls per reading)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.version = "prompt-gate-1"

    def read(self, message_text: str, question_text: str, options: list[str], *, subject: str | None = None) -> Reading:
        who = _one_line(subject or "the person asked about")
        gate = self._letters(self._ask(_conversation(GATE_SYSTEM, GATE_EXAMPLES,
                                                     gate_text(message_text, question_text, who)), 1)[0], "ABC")
        letters = LETTERS[: len(options)]
        q, one_off = letters_and_one_off(self, _conversation(OPTIONS_SYSTEM, OPTIONS_EXAMPLES, options_text(
            message_text, question_text, options, who)), letters)
        return Reading(probs={o: gate["A"] * q[letters[i]] for i, o in enumerate(options)}, unclear=gate["B"],
                       unrelated=gate["C"], one_off=one_off, reader=self.name, reader_version=self.version)
