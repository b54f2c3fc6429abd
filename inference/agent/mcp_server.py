"""`doxa mcp`: the store as an MCP server (the official Python SDK's ``MCPServer``), one store per server.

Tools: ``belief``, ``beliefs``, ``uncertain``, ``context``, ``explain``, ``history``, ``search``, ``ask``,
``answer`` (reads), ``remember`` (a raw message in) and ``correct``, ``approve``, ``outcome``, ``reject``,
``instruct`` (feedback that becomes settled fact); ``forget`` (erasure) only on a server started with
--allow-forget. Each calls the function of the same name in
:mod:`doxa.inference.agent.tools`, the one the CLI calls for ``--json``, so a tool's text result
is byte for byte what `doxa VERB --json` prints; its structured result is the same value
(a list is given under one key, since structured results are objects). A refused call
comes back as a tool error whose text is the line the CLI prints on standard error
("Error: …"), and nothing is written.

The server does not hold the store: every call opens it through
:func:`doxa.inference.read.memory.open_store` and closes it before answering, so `doxa train`,
the CLI and other programs use the same file between calls. Calls are served one at a time.

Over HTTP (streamable HTTP) the server is put behind a guard: :mod:`.mcp_http`.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from doxa import __version__
from doxa.data.errors import IngestError, StoreError
from doxa.data.search import SearchHit

from . import tools
from .answer import AnswerResult
from .ask import AskResult
from .context import Context
from .remember import RememberResult
from doxa.inference.read.feedback import Feedback
from doxa.inference.read.forget import Forgotten
from doxa.inference.read.history import History
from doxa.inference.read.uncertain import Uncertain
from doxa.inference.read.memory import open_store
from doxa.inference.read.results import Belief, Explanation
from doxa.inference.read.params import DEFAULT_ACT_AT

log = logging.getLogger("doxa.mcp")

COMPUTED_ON_READ = ("Probabilities are computed when the tool runs, from the kept evidence and the latest "
                    "trained parameters; doxa never stores a probability as a belief.")

INSTRUCTIONS = (
    "doxa is a belief memory: every answer to a question about a person or thing comes with the probability "
    "the kept evidence supports. Before acting on what you remember, call `context` with the task (or `belief` "
    "for one question, `answer` for a question in words); where `act` is false (or `ask` is true), ask the user first, and `uncertain` lists "
    "what is most worth asking. Record what the user and the world tell you with `correct`, `approve`, "
    "`outcome`, `reject` and `instruct`: these become settled facts the nightly training learns from; hand "
    "over new raw messages with `remember`. "
    + COMPUTED_ON_READ)


@dataclass
class BeliefList:
    beliefs: list[Belief]


@dataclass
class UncertainList:
    uncertain: list[Uncertain]


@dataclass
class SearchResult:
    words: str
    terms: list[str]
    hits: list[SearchHit]


#: Under which key a tool's list result is given as structured content.
LIST_KEYS = {"beliefs": "beliefs", "uncertain": "uncertain"}

QuestionId = Annotated[str, Field(description="Question id, e.g. maya.diet.")]
At = Annotated[str | None, Field(description="ISO 8601 time; default now. For reads: only evidence up to then. "
                                             "For feedback: when it happened (a repeat with the same time is "
                                             "the same record).")]
ActAt = Annotated[float | None, Field(ge=0.0, le=1.0, description="Act threshold: below this the top answer is "
                                                                  f"too uncertain to act on (default {DEFAULT_ACT_AT}).")]
Subject = Annotated[str | None, Field(description="Subject id, e.g. maya (default: every subject).")]
Limit = Annotated[int, Field(ge=0, description="At most this many (0: all).")]
By = Annotated[str, Field(min_length=1, description="Who says so (recorded with the fact).")]

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
FEEDBACK = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ERASE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)


class StrictServer(MCPServer):
    """An ``MCPServer`` that refuses arguments a tool does not take (the SDK would drop them silently): the
    call is a tool error naming them and the arguments it takes, and nothing runs. Input schemas say so
    (``additionalProperties: false``)."""

    async def list_tools(self):
        return [tool.model_copy(update={"input_schema": {**tool.input_schema, "additionalProperties": False}})
                for tool in await super().list_tools()]

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        schema = next((tool.input_schema for tool in await super().list_tools() if tool.name == name), None)
        if schema is not None:  # an unknown tool is the SDK's error
            known = list(schema.get("properties", {}))
            unknown = sorted(set(arguments) - set(known))
            if unknown:
                text = (f"Error: unknown argument{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(repr(a) for a in unknown)} for tool {name}: its arguments are "
                        f"{', '.join(known)}; nothing was done")
                return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        return await super().call_tool(name, arguments, context)


def build_server(db_path: str, *, allow_forget: bool = False) -> MCPServer:
    """An MCP server over the store at ``db_path`` (which must exist); ``allow_forget`` adds the tool
    ``forget`` (erasure, `doxa forget`), which a server offers only when started with --allow-forget."""
    server = StrictServer("doxa", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    one_at_a_time = threading.Lock()

    def call(verb: str, **arguments: Any) -> CallToolResult:
        with one_at_a_time:
            try:
                with open_store(db_path) as mem:
                    value = getattr(tools, verb)(mem, **arguments)
            except (StoreError, IngestError) as err:
                # returned, not raised: the SDK would prefix a raised error's text, and this is the CLI's
                return CallToolResult(content=[TextContent(type="text", text=f"Error: {err}")], is_error=True)
        text = json.dumps(value, indent=2, ensure_ascii=False)
        structured = {LIST_KEYS[verb]: value} if verb in LIST_KEYS else value
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)

    def tool(annotations: ToolAnnotations, description: str):
        return server.tool(annotations=annotations, description=f"{description} {COMPUTED_ON_READ}")

    @tool(READ, "The probability of every answer to one question, as `doxa belief --json` prints it: answers "
                "(option → probability), top, p_top, act (false: too uncertain to act on, ask first), "
                "n_evidence, n_settled, rejected, params_version.")
    def belief(question: QuestionId, at: At = None, act_at: ActAt = None) -> Annotated[CallToolResult, Belief]:
        return call("belief", question=question, at=at, act_at=act_at)

    @tool(READ, "Every belief about a subject (or every belief), in question-id order: {beliefs: [belief, …]}; "
                "the text result is the list `doxa beliefs --json` prints.")
    def beliefs(subject: Subject = None, at: At = None, act_at: ActAt = None,
                limit: Limit = 0) -> Annotated[CallToolResult, BeliefList]:
        return call("beliefs", subject=subject, at=at, act_at=act_at, limit=limit)

    @tool(READ, "The beliefs to ask the user about before acting, most useful first: {uncertain: [{belief, why, "
                "p_wrong, recent_reads, usefulness, entropy, instructions, ask_user}, …]} (the list "
                "`doxa beliefs --uncertain --json` prints). usefulness = P(wrong if acting now) × (1 + reads "
                "in the last 30 days); ask_user is a question to put to the user.")
    def uncertain(subject: Subject = None, at: At = None, act_at: ActAt = None,
                  limit: Limit = 0) -> Annotated[CallToolResult, UncertainList]:
        return call("uncertain", subject=subject, at=at, act_at=act_at, limit=limit)

    @tool(READ, "What a task needs to know, as `doxa context --json` prints it: the subjects it names and one "
                "relation out, their questions ranked by relevance with every answer's probability and an `ask` "
                "flag, and the user's instructions beside them, with a question for the user where the evidence "
                "now contradicts one.")
    def context(task: Annotated[str, Field(min_length=1, description="The task in words, e.g. \"book Maya's "
                                                                     "birthday dinner\".")],
                at: At = None, act_at: ActAt = None,
                limit: Annotated[int, Field(ge=1, description="At most this many questions.")] = 20,
                ) -> Annotated[CallToolResult, Context]:
        return call("context", task=task, at=at, act_at=act_at, limit=limit)

    @tool(READ, "Why doxa believes what it does about one question, term by term (`doxa explain --json`): the "
                "belief, the prior, the change rate, and each message with its source, trust, the reader's "
                "reading, its log-likelihood ratio and how much of it is left after decay; settlements and "
                "rejections.")
    def explain(question: QuestionId, at: At = None) -> Annotated[CallToolResult, Explanation]:
        return call("explain", question=question, at=at)

    @tool(READ, "How the belief in one question moved (`doxa history --json`): {question, text, points: [{at, top, "
                "p, probs, act, event: {kind: reading|settlement|rejection, …}, also}], changes: [{at, from, to}]} — "
                "the top answer and its probability after each change of evidence from `start` to `end`, and the "
                "times the top answer changed.")
    def history(question: QuestionId,
                start: Annotated[str | None, Field(description="ISO 8601: show changes from then on (default: from "
                                                               "the first evidence).")] = None,
                end: Annotated[str | None, Field(description="ISO 8601: only evidence up to then (default now).")]
                = None, act_at: ActAt = None) -> Annotated[CallToolResult, History]:
        return call("history", question=question, start=start, end=end, act_at=act_at)

    @tool(READ, "Full-text search (BM25) over every kept message, best first (`doxa search --json`): {words, "
                "terms, hits: [{message, score, text, source, source_path, sent_at, is_assistant, matched}]}.")
    def search(words: Annotated[str, Field(description="Words to look for.")], subject: Subject = None,
               limit: Annotated[int, Field(ge=1, description="At most this many messages.")] = 20,
               ) -> Annotated[CallToolResult, SearchResult]:
        return call("search", words=words, subject=subject, limit=limit)

    @tool(FEEDBACK, "Ask memory a question nobody prepared (`doxa ask --json`): the question is created (never "
                    "with a probability; without options, the organizer's model proposes them from the kept "
                    "messages), the kept messages about the subject are read by the configured reader, and the "
                    "belief is returned; with no reader configured, the messages found and how to configure one.")
    def ask(question: Annotated[str, Field(min_length=1, description="The question in words.")],
            subject: Annotated[str, Field(description="Whom it is about (subject id).")],
            options: Annotated[list[str] | None, Field(min_length=2, description="The possible answers (default: "
                                                                               "proposed by the organizer's model "
                                                                               "from the kept messages).")] = None,
            kind: Annotated[str | None, Field(description="The question's kind (default: from its words).")] = None,
            question_id: Annotated[str | None, Field(description="Question id (default SUBJECT.KIND).")] = None,
            at: At = None, limit: Annotated[int, Field(ge=1, description="Read at most this many messages.")] = 20,
            ) -> Annotated[CallToolResult, AskResult]:
        return call("ask", question=question, subject=subject, options=options, kind=kind, question_id=question_id,
                    at=at, limit=limit)

    @tool(FEEDBACK, "Ask memory a question in words (`doxa answer --json`), e.g. \"What is my current job?\" or "
                    "\"Where did Maya live before?\": the tracked question it asks is found by search (the "
                    "organizer's model picks among close matches) or created with the options the model proposes "
                    "from the kept messages, and read by the configured reader. Returns {question, answer, p, act, "
                    "abstain, message, settle, alternatives, evidence, created, at (the time the answer is for), "
                    "when (now, previous or first), found_by, changes, skipped}. abstain true means \"I don't "
                    "know\": ask the user (settle says what would settle it).")
    def answer(question: Annotated[str, Field(min_length=1, description="The question in words.")],
               subject: Annotated[str | None, Field(description="Whom it is about (subject id; default: whom the "
                                                                "words name, the user for I/my/me).")] = None,
               at: At = None, act_at: ActAt = None,
               limit: Annotated[int, Field(ge=1, description="Read at most this many messages.")] = 20,
               ) -> Annotated[CallToolResult, AnswerResult]:
        return call("answer", question=question, subject=subject, at=at, act_at=act_at, limit=limit)

    @tool(FEEDBACK, "Hand memory a raw message exactly as it arrived (`doxa remember --json`): it is kept with its "
                    "source and time, the organizer links it to the questions it bears on (creating new ones where "
                    "none fits), the reader reads it against each, and the beliefs it moved come back before and "
                    "after, with the model calls made. With no model configured the message is kept as pending "
                    "(status pending, hint says how to configure one); remembering it again changes nothing.")
    def remember(text: Annotated[str, Field(min_length=1, description="The message exactly as it arrived.")],
                 source: Annotated[str, Field(min_length=1, description="Who it came from: a stored source id, or a "
                                                                         "new source's path such as "
                                                                         "person/self/chat/maya-chat.")],
                 sent_at: Annotated[str | None, Field(description="When it was sent (ISO 8601); default now.")]
                 = None,
                 keep: Annotated[bool, Field(description="When a model call fails, keep the message as pending "
                                                         "instead of refusing it.")] = False,
                 ) -> Annotated[CallToolResult, RememberResult]:
        return call("remember", text=text, source=source, sent_at=sent_at, keep=keep)

    feedback_result = ("Returns {verb, recorded (false: already recorded, nothing written), record (as stored), "
                       "before, after (the belief at that time without and with it), message}.")

    @tool(FEEDBACK, "The user corrected you: record ANSWER as the settled answer to QUESTION (a settlement, how "
                    "correction; `doxa correct --json`). Training learns from it which sources to trust. "
                    + feedback_result)
    def correct(question: QuestionId, answer: Annotated[str, Field(description="The right answer (an option).")],
                at: At = None, by: By = "user") -> Annotated[CallToolResult, Feedback]:
        return call("correct", question=question, answer=answer, at=at, by=by)

    @tool(FEEDBACK, "The user approved what you proposed (`doxa approve --json`): a settlement (how approval) of "
                    "ANSWER, by default the current top answer, recorded with the probability doxa gave it then "
                    "(record.p_before). " + feedback_result)
    def approve(question: QuestionId,
                answer: Annotated[str | None, Field(description="What was approved (default: the top answer).")]
                = None, at: At = None, by: By = "user") -> Annotated[CallToolResult, Feedback]:
        return call("approve", question=question, answer=answer, at=at, by=by)

    @tool(FEEDBACK, "The world showed the answer — a parcel arrived, an email bounced (`doxa outcome --json`): a "
                    "settlement (how outcome) with how it showed. " + feedback_result)
    def outcome(question: QuestionId, answer: Annotated[str, Field(description="The answer the world showed.")],
                how: Annotated[str, Field(min_length=1, description="How it showed, e.g. \"the parcel arrived\".")],
                at: At = None, by: By = "world") -> Annotated[CallToolResult, Feedback]:
        return call("outcome", question=question, answer=answer, how=how, at=at, by=by)

    @tool(FEEDBACK, "The user says ANSWER is not it (`doxa reject --json`): it reads 0 from then on. "
                    + feedback_result)
    def reject(question: QuestionId, answer: Annotated[str, Field(description="The answer that is not it.")],
               at: At = None, by: By = "user") -> Annotated[CallToolResult, Feedback]:
        return call("reject", question=question, answer=answer, at=at, by=by)

    @tool(FEEDBACK, "A directive from the user about a subject (`doxa instruct --json`), kept beside beliefs and "
                    "never merged with them; rests_on names the belief it presumes, so `context` can say when "
                    "the evidence turns against it. Returns {verb, recorded, record (with its id), message}.")
    def instruct(subject: Annotated[str, Field(description="Whom it is about (subject id).")],
                 text: Annotated[str, Field(min_length=1, description="The instruction in words.")],
                 rests_on: Annotated[dict[str, str] | None, Field(
                     description='The belief it presumes: {"question": QUESTION_ID, "answer": OPTION}.')] = None,
                 at: At = None, by: By = "user") -> Annotated[CallToolResult, Feedback]:
        return call("instruct", subject=subject, text=text, at=at, by=by, rests_on=rests_on)

    if allow_forget:
        @server.tool(annotations=ERASE, description=(
            "Erase a message, a source or a subject and everything derived from it (`doxa forget --json`): the "
            "message texts, their readings, the questions and values that rested only on them, and for a subject "
            "its questions, settlements, instructions and relations; the store file is rewritten so the text "
            "leaves the disk, and an erasure record (no content) is kept. It cannot be undone: call it only when "
            "the user asks to forget, and call it first with dry_run true to show them what would go. Returns "
            "{kind, id, dry_run, erasure, rewritten, messages, questions, sources, emptied_sources, "
            "changed_questions, values, "
            "copies_kept, removed (rows per table), beliefs (before and after), staged_removed, note}."))
        def forget(kind: Annotated[Literal["message", "source", "subject"], Field(description="What to forget.")],
                   id: Annotated[str, Field(min_length=1, description="Its id (search shows message ids).")],
                   reason: Annotated[str | None, Field(description="Why (kept in the erasure record; without "
                                                                   "repeating what is forgotten).")] = None,
                   dry_run: Annotated[bool, Field(description="Only say what would be removed.")] = False,
                   by: By = "user") -> Annotated[CallToolResult, Forgotten]:
            return call("forget", kind=kind, id=id, reason=reason, by=by, dry_run=dry_run)

    return server


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("doxa mcp: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


__all__ = ["build_server", "StrictServer", "COMPUTED_ON_READ", "configure_logging"]
