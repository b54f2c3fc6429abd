"""A candidate reader prompt, one call, with the two "no answer" choices asked first.

Prompt 2 lists the options first and *unclear* / *unrelated* last; a 1.5B model almost never
picks the last letter ("My sister is vegan" read for Maya: vegan 0.77, unrelated 0.07). Small
models lean toward early letters and toward answers that repeat words of the message, so
here the first answer is "the message says nothing about this for Maya", the second "it
talks about it but does not say which", and the options follow. The reading maps the
letters back (A → unrelated, B → unclear, C… → options): one call, as prompt 2.
Measured against prompt 2 with ``prompt_study.py --prompts current,first``.
"""

from __future__ import annotations

from typing import Any, Sequence

from doxa.inference.agent import openai_reader as R
from doxa.inference.agent.reader_prompts import LETTERS, SYSTEM_PROMPT, _conversation, _one_line, _quoted
from doxa.inference.agent.readers import Reading
from gate_prompt import letters_and_one_off


def first_labels(options: Sequence[str], who: str) -> list[str]:
    return [f"The message says nothing about this for {who}",
            f"The message talks about this for {who} but does not say which answer"] + [_one_line(o) for o in options]


def first_text(message_text: str, question_text: str, options: Sequence[str], who: str) -> str:
    lines = [f"Message: {_quoted(message_text)}", f"Person: {who}", f"Question: {_one_line(question_text)}"]
    lines += [f"{LETTERS[i]}. {label}" for i, label in enumerate(first_labels(options, who))]
    return "\n".join(lines + ["Answer:"])


_DIET = ("vegetarian", "vegan", "pescatarian", "omnivore")
_WORK = ("Acme", "Globex", "Initech", "Hooli")
_MUSIC = ("jazz", "pop", "rock", "classical")
FIRST_EXAMPLES = (
    (first_text("Ines left Acme in May, she works for Globex now.", "Where does Ines work?", _WORK, "Ines"), "D 1"),
    (first_text("My brother is vegan, so no cheese at dinner please.", "What does Omar eat?", _DIET, "Omar"), "A 1"),
    (first_text("Kenji mentioned something about music, I forgot what.", "What music does Kenji like?", _MUSIC,
                "Kenji"), "B 1"),
    (first_text("Omar's train gets in at six tonight.", "What does Omar eat?", _DIET, "Omar"), "A 2"),
    (first_text("Omar had a big steak at the pub tonight.", "What does Omar eat?", _DIET, "Omar"), "F 2"),
)


class FirstReader(R.OpenAIChatReader):
    """Prompt 2's reader with *unrelated* and *unclear* as answers A and B (one call per reading)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.version = "prompt-first-1"

    def read(self, message_text: str, question_text: str, options: list[str], *, subject: str | None = None) -> Reading:
        who = _one_line(subject or "the person asked about")
        letters = LETTERS[: len(options) + 2]
        p, one_off = letters_and_one_off(self, _conversation(SYSTEM_PROMPT, FIRST_EXAMPLES, first_text(
            message_text, question_text, options, who)), letters)
        return Reading(probs={o: p[letters[i + 2]] for i, o in enumerate(options)}, unclear=p["B"],
                       unrelated=p["A"], one_off=one_off, reader=self.name, reader_version=self.version)
