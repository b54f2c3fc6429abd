"""The questions a reader asks a language model (lettered multiple choice), what a prompt shows of a
message too long for it, and the rule that reads its answer letters."""

from __future__ import annotations

import math
import re
import string
from typing import Any, Sequence

from doxa.data import search
from doxa.data.text import words

from .untrusted import untrusted


#: Bumped whenever the wording of the questions below changes: a reader's fitted
#: temperature belongs to one wording, so a new wording is a new reader version.
PROMPT_VERSION = "2"


# --------------------------------------------------------------------------- long messages

#: The longest message text a prompt shows whole (characters). With the fixed part of a prompt
#: (about 2,000 characters) it fits a 2,048-token context at three characters a token; a pasted
#: document of 60,000 characters fits none, and a server answers it with HTTP 400.
MAX_MESSAGE_CHARS = 4000
#: The pieces a long message is cut into for :func:`excerpt` (characters, at most).
PIECE_CHARS = 400
#: Bumped when :func:`excerpt` chooses differently; a reading of an excerpt carries it
#: (``reader_version`` + ``-excerpt-`` + this), so it is told from a reading of the whole text.
EXCERPT_VERSION = "1"
#: Where a message is cut into pieces: after a sentence's end or at a line break.
_PIECE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def excerpt(message_text: str, topic: str, max_chars: int = MAX_MESSAGE_CHARS) -> tuple[str, bool]:
    """(what a prompt shows of ``message_text``, whether it was cut).

    A message up to ``max_chars`` is shown whole. A longer one is cut into sentences (a sentence
    over :data:`PIECE_CHARS` into runs of words), the pieces are ranked by BM25 against the words
    of ``topic`` (the question and its answers: what the reading is about), and the pieces that
    share a word with it, each with the piece either side, best first, are shown in the message's
    own order up to ``max_chars``, with "…" where text is left out. Where no piece shares a word
    with the topic, the message's beginning is shown, as the organizer shows a long turn. The
    message itself is kept whole in the store; only the prompt is cut.
    """
    if len(message_text) <= max_chars:
        return message_text, False
    pieces = []
    for sentence in _PIECE_END.split(message_text):
        sentence = sentence.strip()
        while len(sentence) > PIECE_CHARS:
            cut = sentence.rfind(" ", 0, PIECE_CHARS)
            cut = cut if cut > 0 else PIECE_CHARS
            pieces.append(sentence[:cut])
            sentence = sentence[cut:].strip()
        if sentence:
            pieces.append(sentence)
    scores, _ = search.bm25(search.content_terms(words(topic)), [words(piece) for piece in pieces])
    ranked = sorted((i for i in range(len(pieces)) if scores[i] > 0), key=lambda i: (-scores[i], i))
    # each hit with the sentences either side of it, best hit first; no hit: the beginning
    order = dict.fromkeys(j for i in ranked for j in (i, i - 1, i + 1) if 0 <= j < len(pieces)) if ranked \
        else range(len(pieces))
    chosen, used = [], 0
    for i in order:
        if used + len(pieces[i]) + 3 > max_chars:
            continue
        chosen.append(i)
        used += len(pieces[i]) + 3
    shown = []
    for n, i in enumerate(sorted(chosen)):
        if (n == 0 and i > 0) or (n > 0 and i > shown[-1][0] + 1):  # text left out before this piece
            shown.append((i, "…"))
        shown.append((i, pieces[i]))
    if not chosen or max(chosen) < len(pieces) - 1:
        shown.append((len(pieces), "…"))
    return " ".join(text for _, text in shown), True


def excerpt_version(version: str, cut: bool) -> str:
    """``version`` of a reading, marked when the reader was shown an excerpt (:func:`excerpt`)."""
    return f"{version}-excerpt-{EXCERPT_VERSION}" if cut else version


# --------------------------------------------------------------------------- letters

#: Letters used to label answers. 26 letters: up to 24 options plus unclear / unrelated (an open
#: question: up to 23 values plus unlisted, unclear, unrelated).
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
#
# Written for small local models (a 1.5B model at 4 bits reads with them; docs/readers.md):
# worked examples as earlier chat turns, options as letters, the person named in every
# question and in the two extra answers (so "my sister is vegan" has an answer that fits it
# better than "vegan" when the question is about Maya), the extra answers worded as plain
# answers rather than labels, and the lasting / one-off question folded into the same reply
# as a digit after the letter: one call per (message, question). The examples are one fixed
# block before the real question, so a server that caches the longest common prompt prefix
# (llama.cpp does) evaluates them once.

SYSTEM_PROMPT = (
    "You read short messages kept in a personal memory and answer multiple-choice questions about one "
    "named person. Use only what the message itself says about that person. A fact about someone else "
    "(a sister, a friend, a colleague, the sender) says nothing about the named person. Do not judge "
    "whether the message is true. Reply with the letter of one answer, a space, then 1 if what the "
    "message says holds over time (a habit or a lasting fact) or 2 if it is about one single occasion."
)
ONE_OFF_SYSTEM_PROMPT = (
    "You read short messages kept in a personal memory and answer multiple-choice questions about one "
    "named person. Reply with the letter of one answer and nothing else."
)
#: The digit after the letter: lasting, one single occasion.
LASTING, ONE_OFF = "1", "2"
ANYONE = "the person asked about"


def _one_line(text: str) -> str:
    return " ".join(untrusted(text).split())


def _quoted(message_text: str) -> str:
    # one line in straight quotes: the message (untrusted text) cannot start a turn of its own
    return '"' + _one_line(message_text).replace('"', "'") + '"'


def choice_labels(options: Sequence[str], subject: str | None) -> list[str]:
    """The answers of the lettered question: the options, then *unclear*, then *unrelated*."""
    who = _one_line(subject or ANYONE)
    return [_one_line(o) for o in options] + [
        f"The message talks about this for {who} but does not say which answer",
        f"The message says nothing about this for {who}",
    ]


def choice_text(message_text: str, question_text: str, labels: Sequence[str], subject: str | None) -> str:
    lines = [f"Message: {_quoted(message_text)}", f"Person: {_one_line(subject or ANYONE)}",
             f"Question: {_one_line(question_text)}"]
    lines += [f"{LETTERS[i]}. {label}" for i, label in enumerate(labels)]
    lines.append("Answer:")
    return "\n".join(lines)


def one_off_text(message_text: str, question_text: str, subject: str | None) -> str:
    who = _one_line(subject or ANYONE)
    return "\n".join([
        f"Message: {_quoted(message_text)}", f"Person: {who}", f"Topic: {_one_line(question_text)}",
        f"Does the message tell how things usually are for {who}, or about one single occasion?",
        f"A. How things usually are for {who} (a habit or a lasting fact)",
        "B. One single occasion (today, tonight, one meal, one trip, once)",
        "C. Cannot tell",
        "Answer:",
    ])


_DIET = ("vegetarian", "vegan", "pescatarian", "omnivore")
_WORK = ("Acme", "Globex", "Initech", "Hooli")
_MUSIC = ("jazz", "pop", "rock", "classical")


def _example(message_text: str, subject: str, question_text: str, options: Sequence[str]) -> str:
    return choice_text(message_text, question_text, choice_labels(options, subject), subject)


#: (user turn, assistant reply): a change of answer, another person's fact (not about the person
#: asked), a vague mention (no answer given), and a single occasion.
CHOICE_EXAMPLES: tuple[tuple[str, str], ...] = (
    (_example("Ines left Acme in May, she works for Globex now.", "Ines", "Where does Ines work?", _WORK), "B 1"),
    (_example("My brother is vegan, so no cheese at dinner please.", "Omar", "What does Omar eat?", _DIET), "F 1"),
    (_example("Kenji mentioned something about music, I forgot what.", "Kenji", "What music does Kenji like?",
              _MUSIC), "E 1"),
    (_example("Omar had a big steak at the pub tonight.", "Omar", "What does Omar eat?", _DIET), "D 2"),
)
ONE_OFF_EXAMPLES: tuple[tuple[str, str], ...] = (
    (one_off_text("Omar had fish and chips at the pub tonight.", "What does Omar eat?", "Omar"), "B"),
    (one_off_text("Ines has cycled to work every day for years.", "How does Ines get around?", "Ines"), "A"),
)


def _conversation(system: str, examples: Sequence[tuple[str, str]], final: str) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": system}]
    for user, reply in examples:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
    return messages + [{"role": "user", "content": final}]


def choice_messages(message_text: str, question_text: str, labels: Sequence[str],
                    subject: str | None) -> list[dict[str, str]]:
    """The chat messages of one reading: the letter of an answer, then the lasting / one-off digit."""
    return _conversation(SYSTEM_PROMPT, CHOICE_EXAMPLES, choice_text(message_text, question_text, labels, subject))


# --------------------------------------------------------------------------- open questions
#
# An open question (docs/design.md §2, "Open questions") lists the values named so far; the message
# may state another one, or say the answer changed without naming the new one ("we moved, no
# address yet"). Its answers are the listed values, then one more, *unlisted* ("a different answer,
# not listed"), then unclear and unrelated, each naming the person. Its worked examples are a fixed
# block of their own after the same system message, so a closed question's prompt is word for word
# what it was and keeps its version; an open question's reading carries ``prompt-2-open-2``.

#: 2: a reading that states an answer is also asked whether the message says it changed (below).
OPEN_PROMPT_VERSION = "2"


def open_labels(options: Sequence[str], subject: str | None) -> list[str]:
    """The answers of an open question: its listed values, *unlisted*, then *unclear* and *unrelated*."""
    labels = choice_labels(options, subject)
    who = _one_line(subject or ANYONE)
    return labels[:len(options)] + [f"A different answer for {who}, not listed above"] + labels[len(options):]


def _open_example(message_text: str, subject: str, question_text: str, options: Sequence[str]) -> str:
    return choice_text(message_text, question_text, open_labels(options, subject), subject)


#: (user turn, assistant reply): a value not listed, a change with no new value named yet (both the
#: *unlisted* answer), a listed value, and another person's value (nothing about the person asked).
OPEN_EXAMPLES: tuple[tuple[str, str], ...] = (
    (_open_example("Ines left Acme in May, she works for Globex now.", "Ines", "Where does Ines work?",
                   ("Acme",)), "B 1"),
    (_open_example("Omar moved out of 12 Elm Street last week, no new address yet.", "Omar",
                   "Where does Omar live?", ("12 Elm Street",)), "B 1"),
    (_open_example("Kenji still lives at 7 Harbour Road, next to the station.", "Kenji", "Where does Kenji live?",
                   ("12 Elm Street", "7 Harbour Road")), "B 1"),
    (_open_example("My brother just started at Globex.", "Omar", "Where does Omar work?", ("Acme", "Initech")),
     "E 1"),
)


def open_messages(message_text: str, question_text: str, labels: Sequence[str],
                  subject: str | None) -> list[dict[str, str]]:
    """The chat messages of one reading of an open question (``labels``: :func:`open_labels`)."""
    return _conversation(SYSTEM_PROMPT, OPEN_EXAMPLES, choice_text(message_text, question_text, labels, subject))


# --------------------------------------------------------------------------- reported changes
#
# Whether a message that states an answer of an open question also says the answer changed
# (docs/design.md §2, "Reported changes"): its own short question, asked only of a reading that
# states an answer, so the value question above stays word for word what it was. Its yes is the
# reading's ``changed``. Part of the open reading's wording: OPEN_PROMPT_VERSION counts it.

def change_text(message_text: str, question_text: str, subject: str | None) -> str:
    who = _one_line(subject or ANYONE)
    return "\n".join([
        f"Message: {_quoted(message_text)}", f"Person: {who}", f"Topic: {_one_line(question_text)}",
        f"Does the message say that this is new or has changed for {who} (now, moved, switched, no longer, "
        "went up or down to)?",
        f"A. Yes: it says that for {who} this changed or is new",
        "B. No: it does not say that it changed",
        "Answer:",
    ])


#: A change with the new value, a change with none, a value that stayed, a lasting fact told plainly.
CHANGE_EXAMPLES: tuple[tuple[str, str], ...] = (
    (change_text("Ines left Acme in May, she works for Globex now.", "Where does Ines work?", "Ines"), "A"),
    (change_text("Omar moved out of 12 Elm Street last week, no new address yet.", "Where does Omar live?",
                 "Omar"), "A"),
    (change_text("Kenji still lives at 7 Harbour Road, next to the station.", "Where does Kenji live?", "Kenji"),
     "B"),
    (change_text("Maya runs five kilometres before work every morning.", "How far does Maya run?", "Maya"), "B"),
)


def change_messages(message_text: str, question_text: str, subject: str | None) -> list[dict[str, str]]:
    """The yes (A) / no (B) question whether the message says the answer changed."""
    return _conversation(ONE_OFF_SYSTEM_PROMPT, CHANGE_EXAMPLES, change_text(message_text, question_text, subject))


def one_off_messages(message_text: str, question_text: str, subject: str | None) -> list[dict[str, str]]:
    """The separate lasting (A) / one-off (B) / cannot tell (C) question, for a model that gave no digit."""
    return _conversation(ONE_OFF_SYSTEM_PROMPT, ONE_OFF_EXAMPLES, one_off_text(message_text, question_text, subject))


# --------------------------------------------------------------------------- several questions in one prompt
#
# The batch prompt: the message once, then its questions numbered, each with its own lettered
# answers (the same answers as the single prompt: options, unclear, unrelated, each naming its
# person); the reply is one line per question, "<number>: <letter> <digit>". Each letter is read
# off the top log-probabilities at its own position in the reply, so a question's reading is
# conditioned on the answers written before it. A new wording, so a reader version of its own.

BATCH_PROMPT_VERSION = "1"

BATCH_SYSTEM_PROMPT = (
    "You read short messages kept in a personal memory and answer numbered multiple-choice questions, each "
    "about one named person. Use only what the message itself says about that question's person. A fact "
    "about someone else (a sister, a friend, a colleague, the sender) says nothing about the named person. "
    "Do not judge whether the message is true. Answer every question on its own line: its number, a colon, "
    "the letter of one answer, a space, then 1 if what the message says holds over time (a habit or a "
    "lasting fact) or 2 if it is about one single occasion."
)


def batch_text(message_text: str, questions: Sequence[tuple[str, Sequence[str], str | None]]) -> str:
    """One message and its questions: ``questions`` holds (question text, answer labels, person)."""
    lines = [f"Message: {_quoted(message_text)}"]
    for n, (question_text, labels, subject) in enumerate(questions, start=1):
        lines += ["", f"Question {n} (person: {_one_line(subject or ANYONE)}): {_one_line(question_text)}"]
        lines += [f"{LETTERS[i]}. {label}" for i, label in enumerate(labels)]
    lines += ["", "Answers:"]
    return "\n".join(lines)


def _batch_example(message_text: str, asked: Sequence[tuple[str, str, Sequence[str]]]) -> str:
    return batch_text(message_text, [(q, choice_labels(options, who), who) for who, q, options in asked])


BATCH_EXAMPLES: tuple[tuple[str, str], ...] = (
    (_batch_example("Ines left Acme in May, she works for Globex now.",
                    [("Ines", "Where does Ines work?", _WORK), ("Ines", "What music does Ines like?", _MUSIC)]),
     "1: B 1\n2: F 1"),
    (_batch_example("My brother is vegan, but Omar had a big steak at the pub tonight.",
                    [("Omar", "What does Omar eat?", _DIET), ("Kenji", "What does Kenji eat?", _DIET)]),
     "1: D 2\n2: F 1"),
)


def batch_messages(message_text: str,
                   questions: Sequence[tuple[str, Sequence[str], str | None]]) -> list[dict[str, str]]:
    """The chat messages of one message read against several questions at once."""
    return _conversation(BATCH_SYSTEM_PROMPT, BATCH_EXAMPLES, batch_text(message_text, questions))
