"""The questions a reader asks a language model (lettered multiple choice) and the rule that reads its answer letters."""

from __future__ import annotations

import math
import string
from typing import Any, Sequence

from .reading import UNCLEAR, UNRELATED

#: Bumped whenever the wording of the questions below changes: a reader's fitted
#: temperature belongs to one wording, so a new wording is a new reader version.
PROMPT_VERSION = "1"


# --------------------------------------------------------------------------- letters

#: Letters used to label answers. 26 letters: up to 24 options plus unclear / unrelated.
LETTERS = string.ascii_uppercase

#: Characters a tokenizer may leave around a letter: spaces, SentencePiece / byte-level
#: BPE word markers, and the punctuation of "A." / "(A)" / "A:".
_TOKEN_DECORATION = " \t\n\r\u2581\u0120.():*"


def _token_letter(token: Any) -> str | None:
    """The answer letter a token stands for (" a", "A.", "(A" → "A"), else None."""
    if not isinstance(token, str):
        return None
    core = token.strip(_TOKEN_DECORATION)
    if len(core) == 1 and core.upper() in LETTERS:
        return core.upper()
    return None


def letter_probabilities(
    top_logprobs: Sequence[tuple[str, float]], letters: Sequence[str]
) -> dict[str, float] | None:
    """Probability of each answer letter from the top log-probabilities of one token.

    Tokens that spell the same letter (``"A"``, ``" A"``, ``"a"``) are pooled by adding
    their probabilities. A letter absent from the list is below every listed token, and
    can hold at most the mass the list leaves out; it gets
    ``min(unlisted mass / number of absent letters, smallest listed probability)`` —
    its fair share of what the server did not show, capped by what it could at most be.
    The letters are then renormalised to sum to 1: the question allowed only a letter,
    so the answer is conditioned on being one.

    Returns None when no token of the list is one of ``letters``.
    """
    wanted = {letter.upper() for letter in letters}
    mass: dict[str, float] = {}
    listed_probs: list[float] = []
    for token, logprob in top_logprobs:
        if logprob is None or not math.isfinite(logprob):
            continue
        p = math.exp(min(float(logprob), 0.0))
        listed_probs.append(p)
        letter = _token_letter(token)
        if letter in wanted:
            mass[letter] = mass.get(letter, 0.0) + p
    if not mass:
        return None
    absent = [letter for letter in letters if letter.upper() not in mass]
    if absent:
        unlisted = max(0.0, 1.0 - math.fsum(listed_probs))
        share = min(unlisted / len(absent), min(listed_probs))
        for letter in absent:
            mass[letter.upper()] = share
    total = math.fsum(mass.values())
    return {letter: mass[letter.upper()] / total for letter in letters}


# --------------------------------------------------------------------------- prompts

_SYSTEM_PROMPT = (
    "You read one message and answer one multiple-choice question about what the "
    "message says. Judge only what the message states or clearly implies, not whether "
    "it is true. Answer with a single capital letter and nothing else."
)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _fenced_message(message_text: str) -> str:
    # The message is untrusted text; keep it from closing its own fence.
    body = message_text.replace("</message>", "</ message>")
    return f"<message>\n{body}\n</message>"


def _choice_prompt(
    message_text: str, question_text: str, labels: Sequence[str], subject: str | None
) -> str:
    about = f" (about {_one_line(subject)})" if subject else ""
    lines = [
        _fenced_message(message_text),
        "",
        f"Question{about}: {_one_line(question_text)}",
        "Which answer does the message state or imply?",
    ]
    lines += [f"{LETTERS[i]}. {label}" for i, label in enumerate(labels)]
    lines.append("Answer with one letter.")
    return "\n".join(lines)


def _choice_labels(options: Sequence[str]) -> list[str]:
    return [_one_line(o) for o in options] + [
        f"{UNCLEAR} (the message is about this question but does not say which answer)",
        f"{UNRELATED} (the message says nothing about this question)",
    ]


_ONE_OFF_LABELS = (
    "lasting (a state that holds over time)",
    "one-off (a single event or occasion)",
    "unclear",
)


def _one_off_prompt(message_text: str, question_text: str, subject: str | None) -> str:
    about = f" (about {_one_line(subject)})" if subject else ""
    lines = [
        _fenced_message(message_text),
        "",
        f"Topic{about}: {_one_line(question_text)}",
        "Is what the message says on this topic a lasting state or a one-off?",
    ]
    lines += [f"{LETTERS[i]}. {label}" for i, label in enumerate(_ONE_OFF_LABELS)]
    lines.append("Answer with one letter.")
    return "\n".join(lines)
