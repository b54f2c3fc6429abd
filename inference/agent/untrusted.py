"""Text a model is shown to read, never to obey: one escaping for the organizer's and the reader's prompts."""

from __future__ import annotations

import re

#: Mistral's control words: a bracketed word in capitals, [INST], [/INST], [SYSTEM_PROMPT], [TOOL_CALLS].
_BRACKET_WORD = re.compile(r"\[(\s*/?\s*[A-Z][A-Z_]*\s*\])")


def untrusted(text: str) -> str:
    """Text a model is shown to read, never to obey (a message, a name, a question the organizer wrote):
    nothing in it can close the ``<message>`` it stands in or act as a chat-template token.

    Every ``<`` becomes ``‹`` (U+2039): each delimiter and special token that tokenizers and
    chat templates match starts with it (``</message>`` in any casing or spacing, ``<|im_end|>``,
    ``<|eot_id|>``, ``<|start_header_id|>``, ``<|endoftext|>``, ``<s>``, ``<<SYS>>``,
    ``<start_of_turn>``, ``<｜end▁of▁sentence｜>``), so none of them survives, nor one a new
    template invents; a model still reads ``‹`` as the bracket it looks like, so the text means
    what it said. A bracketed word in capitals (``[INST]``) gets ``［`` (U+FF3B) for the same
    reason. Replacing one character, not recognising tags, leaves no spelling to slip through.
    """
    return _BRACKET_WORD.sub(r"［\1", str(text).replace("<", "‹"))
