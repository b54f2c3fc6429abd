"""Readers: the OpenAI-compatible HTTP reader against a real loopback server, the
letter-to-probability rule, reading records and the readings-file loader."""

from __future__ import annotations

import io
import json
import math
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from doxa.inference.agent.readers import (
    SUM_TOLERANCE,
    OpenAIChatReader,
    Reading,
    ReaderError,
    ReadingFormatError,
    letter_probabilities,
    reader_from_env,
)
from llm_server import FakeChatServer
from reading_files import load_readings

ALLERGY_Q = "Is Maya allergic to peanuts?"
DIET_Q = "What does Maya eat?"
DIET_OPTIONS = ["vegetarian", "eats fish", "eats meat"]


def fast_reader(server: FakeChatServer, **kwargs) -> OpenAIChatReader:
    config = {"retries": 3, "backoff_s": 0.01, "timeout_s": 5.0}
    config.update(kwargs)
    return OpenAIChatReader(server.url, **config)


def reading_sum(reading: Reading) -> float:
    return math.fsum(reading.probs.values()) + reading.unclear + reading.unrelated


@pytest.fixture
def server():
    with FakeChatServer({"peanut": "yes", "fish": "eats fish", "tonight": "one-off"}) as s:
        yield s


# --------------------------------------------------------------------------- success


def test_favoured_option_wins_and_probabilities_sum_to_one(server):
    reader = fast_reader(server, model="tiny-model", api_key="sekret", ask_one_off=False)
    reading = reader.read("Never give me anything with peanut in it", ALLERGY_Q, ["yes", "no"], subject="maya")

    assert reading.top == "yes"
    assert abs(reading_sum(reading) - 1.0) < 1e-9
    # Every letter is listed, so the letters share all mass but the one non-letter token.
    assert reading.probs["yes"] == pytest.approx(server.favoured_p / (1 - server.non_letter_p))
    assert reading.reader == "llm:tiny-model" and reading.reader_version

    (request,) = server.requests
    body = request["body"]
    assert body["max_tokens"] == 1 and body["temperature"] == 0
    assert body["logprobs"] is True and body["top_logprobs"] == 20
    assert body["model"] == "tiny-model"
    assert request["headers"]["Authorization"] == "Bearer sekret"
    labels = request["labels"]
    assert [labels[k] for k in "AB"] == ["yes", "no"]
    # unclear and unrelated are plain answers that name the person asked about
    assert labels["C"] == "The message talks about this for maya but does not say which answer"
    assert labels["D"] == "The message says nothing about this for maya"
    final = body["messages"][-1]["content"]
    assert final.startswith('Message: "Never give me anything with peanut in it"\nPerson: maya\n')
    assert final.endswith("Answer:")
    # worked examples come first, as earlier turns, the same for every call (a cacheable prefix)
    roles = [m["role"] for m in body["messages"]]
    assert roles[0] == "system" and roles[1:-1] == ["user", "assistant"] * 4 and roles[-1] == "user"
    assert any("My brother is vegan" in m["content"] for m in body["messages"])


def test_unrelated_message_reads_as_unrelated(server):
    reading = fast_reader(server, ask_one_off=False).read("The train was late again", DIET_Q, DIET_OPTIONS)
    assert reading.unrelated > max(max(reading.probs.values()), reading.unclear)
    assert set(reading.probs) == set(DIET_OPTIONS)
    assert abs(reading_sum(reading) - 1.0) < 1e-9


def test_letters_missing_from_top_logprobs_get_a_bounded_share():
    # Only the favoured letter and the non-letter token are listed: every other letter is
    # absent and must stay below the smallest listed token.
    with FakeChatServer({"fish": "eats fish"}, top_n=3) as server:
        reading = fast_reader(server, ask_one_off=False).read("Grilled fish for me", DIET_Q, DIET_OPTIONS)
    assert reading.top == "eats fish"
    assert abs(reading_sum(reading) - 1.0) < 1e-9
    others = [reading.probs["vegetarian"], reading.probs["eats meat"], reading.unclear, reading.unrelated]
    assert max(others) < reading.probs["eats fish"]
    assert all(p > 0 for p in others)


def test_legacy_logprobs_shape_is_understood():
    with FakeChatServer({"peanut": "no"}, shape="legacy") as server:
        reading = fast_reader(server, ask_one_off=False).read("peanut is fine", ALLERGY_Q, ["yes", "no"])
    assert reading.top == "no"


# --------------------------------------------------------------------------- one-off


def test_one_off_question_reads_one_off_and_lasting(server):
    reader = fast_reader(server)
    event = reader.read("Had fish tonight at the harbour", DIET_Q, DIET_OPTIONS)
    lasting = reader.read("I eat fish now, for good", DIET_Q, DIET_OPTIONS)

    assert event.top == "eats fish" and lasting.top == "eats fish"
    assert event.one_off == pytest.approx(server.favoured_p / (1 - server.non_letter_p))
    assert lasting.one_off < 0.5 < event.one_off
    assert len(server.requests) == 2  # one call per reading: the digit after the letter
    assert server.requests[0]["body"]["max_tokens"] >= 2


def test_a_model_that_gives_no_digit_is_asked_the_one_off_question_apart():
    with FakeChatServer({"fish": "eats fish", "tonight": "one-off"}, no_digit=True) as server:
        reader = fast_reader(server)
        event = reader.read("Had fish tonight at the harbour", DIET_Q, DIET_OPTIONS, subject="Maya")
        assert event.top == "eats fish" and event.one_off > 0.5
        assert len(server.requests) == 2 and reader.requests == 2
        one_off_labels = server.requests[1]["labels"]
        assert one_off_labels["A"].startswith("How things usually are for Maya")
        assert one_off_labels["B"].startswith("One single occasion")


def test_one_off_question_can_be_turned_off(server):
    reading = fast_reader(server, ask_one_off=False).read("Had fish tonight", DIET_Q, DIET_OPTIONS)
    assert reading.one_off == 0.0
    assert len(server.requests) == 1


# --------------------------------------------------------------------------- retries and errors


@pytest.mark.parametrize("fault", ["500", "503", "429", "drop"])
def test_transient_failures_are_retried(server, fault):
    server.fail(fault, times=2)
    reading = fast_reader(server, ask_one_off=False).read("peanut", ALLERGY_Q, ["yes", "no"])
    assert reading.top == "yes"
    assert len(server.requests) == 3


def test_retries_give_up_with_a_clear_error(server):
    server.fail("500", times=10)
    with pytest.raises(ReaderError) as err:
        fast_reader(server, retries=2, ask_one_off=False).read("peanut", ALLERGY_Q, ["yes", "no"])
    assert server.url in str(err.value) and "3 attempts" in str(err.value) and "HTTP 500" in str(err.value)
    assert len(server.requests) == 3


@pytest.mark.parametrize("fault, hint", [("400", "DOXA_READER_MODEL"), ("401", "DOXA_READER_KEY")])
def test_client_errors_fail_at_once(server, fault, hint):
    server.fail(fault)
    with pytest.raises(ReaderError) as err:
        fast_reader(server).read("peanut", ALLERGY_Q, ["yes", "no"])
    message = str(err.value)
    assert f"HTTP {fault}" in message and server.url in message and hint in message
    assert len(server.requests) == 1


def test_wrong_base_url_says_to_check_it(server):
    reader = OpenAIChatReader(server.url.replace("/v1", "/v2"), retries=0)
    with pytest.raises(ReaderError, match="HTTP 404.*DOXA_READER_URL"):
        reader.read("peanut", ALLERGY_Q, ["yes", "no"])


@pytest.mark.parametrize(
    "fault, says",
    [
        ("malformed", "not JSON"),
        ("no_choices", "no choices"),
        ("no_logprobs", "did not return logprobs"),
        ("no_letter", "no answer letter"),
    ],
)
def test_malformed_answers_raise_reader_error(server, fault, says):
    server.fail(fault)
    with pytest.raises(ReaderError) as err:
        fast_reader(server).read("peanut", ALLERGY_Q, ["yes", "no"])
    assert says in str(err.value) and server.url in str(err.value)
    assert len(server.requests) == 1  # a deterministic answer is not retried


def test_timeout_is_retried_then_fails(server):
    server.slow_s = 1.0
    server.fail("slow", times=10)
    with pytest.raises(ReaderError) as err:
        fast_reader(server, timeout_s=0.2, retries=2).read("peanut", ALLERGY_Q, ["yes", "no"])
    assert "3 attempts" in str(err.value) and "0.2 s" in str(err.value)
    assert len(server.requests) == 3


def test_timeout_then_success(server):
    server.slow_s = 3.0  # far past the timeout, which is far past a loopback answer on a loaded machine
    server.fail("slow")
    reading = fast_reader(server, timeout_s=1.0, ask_one_off=False).read("peanut", ALLERGY_Q, ["yes", "no"])
    assert reading.top == "yes"
    assert len(server.requests) == 2


def test_connection_refused_is_retried_then_fails():
    with socket.socket() as sock:  # a port with nobody listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    reader = OpenAIChatReader(f"http://127.0.0.1:{port}/v1", retries=1, backoff_s=0.01)
    with pytest.raises(ReaderError, match="2 attempts.*cannot connect"):
        reader.read("peanut", ALLERGY_Q, ["yes", "no"])


# --------------------------------------------------------------------------- configuration


def test_reader_from_env():
    assert reader_from_env({}) is None
    assert reader_from_env({"DOXA_READER_URL": "  "}) is None
    env = {"DOXA_READER_URL": "http://127.0.0.1:8080/v1/", "DOXA_READER_MODEL": "qwen", "DOXA_READER_KEY": "sk-secret-123"}
    reader = reader_from_env(env, retries=5)
    assert isinstance(reader, OpenAIChatReader)
    assert reader.chat_url == "http://127.0.0.1:8080/v1/chat/completions"
    assert (reader.model, reader.api_key, reader.retries) == ("qwen", "sk-secret-123", 5)
    assert "sk-secret-123" not in repr(reader)  # the key stays out of logs
    bare = reader_from_env({"DOXA_READER_URL": "http://h/v1"})
    assert bare.model is None and bare.api_key is None


def test_too_many_options_is_refused():
    reader = OpenAIChatReader("http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="too many"):
        reader.read("x", "q", [f"o{i}" for i in range(25)])


# --------------------------------------------------------------------------- letter rule


def test_letter_probabilities_worked_example():
    # Listed: A .6 (as "A" .5 and " a" .1), B .2, "x" .1 -> unlisted mass .1.
    # Absent C and D each get min(.1 / 2, .1) = .05; letters total .9.
    top = [("A", math.log(0.5)), (" a", math.log(0.1)), ("B", math.log(0.2)), ("x", math.log(0.1))]
    p = letter_probabilities(top, "ABCD")
    expected = {"A": 0.6 / 0.9, "B": 0.2 / 0.9, "C": 0.05 / 0.9, "D": 0.05 / 0.9}
    assert p == pytest.approx(expected)


def test_letter_probabilities_none_without_letters():
    assert letter_probabilities([("The", -0.1), ("Z", -2.0)], "ABC") is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["A", " B", "c", "D.", "(E", "The", "\n", "yes"]), st.floats(-30.0, 0.0)),
        min_size=1,
        max_size=20,
    )
)
def test_letter_probabilities_properties(top):
    letters = "ABCDE"
    p = letter_probabilities(top, letters)
    if p is None:
        return
    assert set(p) == set(letters)
    assert abs(math.fsum(p.values()) - 1.0) < 1e-9
    assert all(0.0 <= v <= 1.0 for v in p.values())
    listed = {tok.strip(" .(").upper() for tok, _ in top} & set(letters)
    absent = set(letters) - listed
    for a in absent:  # an unlisted letter never outranks a listed one
        assert all(p[a] <= p[b] + 1e-12 for b in listed)


# --------------------------------------------------------------------------- records and files


def test_to_record_round_trips_through_load_readings():
    reading = Reading(
        probs={"vegetarian": 0.01, "eats fish": 0.93, "eats meat": 0.0},
        unclear=0.04,
        unrelated=0.02,
        one_off=0.09,
        reader="jev-1",
        reader_version="prompt-1",
    )
    record = reading.to_record("m3", "maya.diet")
    assert record["type"] == "reading" and record["message"] == "m3" and record["question"] == "maya.diet"
    assert abs(sum(record["probs"].values()) + record["unclear"] + record["unrelated"] - 1) < SUM_TOLERANCE
    lines = [
        json.dumps({"type": "message", "id": "m3", "source": "s", "sent_at": "2026-06-02", "text": "fish"}),
        "",
        json.dumps(record),
    ]
    (loaded,) = load_readings(io.StringIO("\n".join(lines)), options_by_question={"maya.diet": DIET_OPTIONS})
    assert (loaded.message, loaded.question, loaded.line) == ("m3", "maya.diet", 3)
    assert loaded.reading == reading


def test_http_reading_is_a_valid_record(server):
    reading = fast_reader(server).read("fish tonight", DIET_Q, DIET_OPTIONS)
    line = json.dumps(reading.to_record("m1", "maya.diet"))
    (loaded,) = load_readings([line], options_by_question={"maya.diet": DIET_OPTIONS})
    assert loaded.reading.probs == pytest.approx(reading.probs)


def test_load_readings_names_every_bad_line(tmp_path):
    good = {"type": "reading", "message": "m1", "question": "q", "reader": "r",
            "probs": {"yes": 0.7, "no": 0.2}, "unclear": 0.05, "unrelated": 0.05}
    bad_sum = dict(good, unrelated=0.5)
    bad_key = dict(good, probs={"yes": 0.7, "maybe": 0.2})
    no_reader = {k: v for k, v in good.items() if k != "reader"}
    path = tmp_path / "readings.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [good, bad_sum, bad_key, no_reader]) + "\n{oops\n")
    with pytest.raises(ReadingFormatError) as err:
        load_readings(path, options_by_question={"q": ["yes", "no"]})
    text = str(err.value)
    assert "line 1" not in text
    assert "line 2: probs + unclear + unrelated sums to" in text
    assert "line 3: probs: keys must be" in text and "'maybe'" in text
    assert "line 4: reader" in text
    assert "line 5: not JSON" in text


def test_reading_refuses_probabilities_that_do_not_sum_to_one():
    with pytest.raises(ValueError, match="sums to"):
        Reading(probs={"yes": 0.5, "no": 0.5}, unclear=0.1, unrelated=0.0)
    with pytest.raises(ValueError, match="one_off"):
        Reading(probs={"yes": 1.0}, unclear=0.0, unrelated=0.0, one_off=1.5)


# --------------------------------------------------------------------------- several questions in one prompt

BATCH_QUESTIONS = [(ALLERGY_Q, ["yes", "no"], "Maya"), (DIET_Q, DIET_OPTIONS, "Maya"),
                   ("Where does Omar work?", ["Acme", "Globex"], "Omar")]


def test_batch_reads_each_question_at_its_own_place_in_one_call(server):
    reader = fast_reader(server, batch=4)
    readings = reader.read_many("Never give me anything with peanut in it, I had fish tonight", BATCH_QUESTIONS)

    assert len(server.requests) == 1 and server.requests[0]["kind"] == "reader-batch"
    assert [r.top for r in readings[:2]] == ["yes", "eats fish"]
    assert readings[2].unrelated > 0.5  # no rule names a workplace: the server answered "says nothing"
    assert all(abs(reading_sum(r) - 1.0) < 1e-9 for r in readings)
    assert all(r.one_off > 0.5 for r in readings)  # "tonight": the digit 2 on every line
    assert {r.reader_version for r in readings} == {reader.version + "-batch-1"}
    # the same numbers as one question at a time, whose letters the server lays out alike
    single = fast_reader(server).read("Never give me anything with peanut in it", ALLERGY_Q, ["yes", "no"],
                                      subject="Maya")
    assert readings[0].probs["yes"] == pytest.approx(single.probs["yes"])


def test_batch_chunks_by_its_size_and_reads_a_lone_question_alone(server):
    reader = fast_reader(server, batch=2)
    readings = reader.read_many("peanut", BATCH_QUESTIONS)
    assert [r["kind"] for r in server.requests] == ["reader-batch", "reader"]
    assert len(readings) == 3 and reader.requests == 2
    assert readings[2].reader_version == reader.version


def test_a_reply_that_stops_after_its_first_line_reads_the_rest_alone(server):
    server.batch_first_line_only = True
    reader = fast_reader(server, batch=3)
    readings = reader.read_many("peanut", BATCH_QUESTIONS)
    assert [r["kind"] for r in server.requests] == ["reader-batch", "reader", "reader"]
    assert readings[0].top == "yes" and readings[0].reader_version.endswith("-batch-1")


def test_a_question_the_batch_reply_skips_is_read_on_its_own(server):
    server.batch_skip = {2}
    reader = fast_reader(server, batch=3)
    readings = reader.read_many("peanut and fish", BATCH_QUESTIONS)
    assert [r["kind"] for r in server.requests] == ["reader-batch", "reader"]
    assert readings[1].top == "eats fish" and readings[1].reader_version == reader.version
    assert readings[0].reader_version == readings[2].reader_version == reader.version + "-batch-1"


def test_a_server_that_answers_no_lines_turns_batching_off():
    with FakeChatServer({"peanut": "yes"}, no_digit=True) as server:
        server.batch_skip = {1, 2, 3}  # a reply of prose, no line of answers
        reader = fast_reader(server, batch=3, ask_one_off=False)
        first = reader.read_many("peanut", BATCH_QUESTIONS)
        again = reader.read_many("peanut", BATCH_QUESTIONS)
        kinds = [r["kind"] for r in server.requests]
        assert kinds == ["reader-batch"] + ["reader"] * 6  # one try, then one question at a time
        assert first[0].top == again[0].top == "yes"


def test_batch_is_read_from_the_environment_and_checked():
    env = {"DOXA_READER_URL": "http://127.0.0.1:9/v1", "DOXA_READER_BATCH": "4"}
    assert reader_from_env(env).batch == 4
    with pytest.raises(ReaderError, match="DOXA_READER_BATCH must be a whole number"):
        reader_from_env({**env, "DOXA_READER_BATCH": "many"})
    with pytest.raises(ValueError, match="batch must be"):
        OpenAIChatReader("http://127.0.0.1:9/v1", batch=0)


# --------------------------------------------------------------------------- long messages

#: A pasted document: 60,000 characters, one sentence of which bears on the question.
_FILLER = " ".join(f"Step {i}: stir the sauce and let it simmer for a while." for i in range(600))
LONG_MESSAGE = _FILLER + " Never give me anything with peanut in it, I react badly. " + _FILLER


def test_a_message_too_long_for_the_context_is_read_from_its_excerpt():
    """A server with a context refuses the whole document (HTTP 400); the reader shows it the part
    that bears on the question, and the reading's version says it was read from an excerpt."""
    from doxa.inference.agent.reader_prompts import EXCERPT_VERSION, MAX_MESSAGE_CHARS

    with FakeChatServer({"peanut": "yes"}, max_prompt_chars=10_000) as server:
        reader = fast_reader(server, ask_one_off=False)
        whole = reader.read("Never give me anything with peanut in it", ALLERGY_Q, ["yes", "no"], subject="maya")
        long = reader.read(LONG_MESSAGE, ALLERGY_Q, ["yes", "no"], subject="maya")
        many = fast_reader(server, ask_one_off=False, batch=2).read_many(
            LONG_MESSAGE, [(ALLERGY_Q, ["yes", "no"], "maya"), (DIET_Q, DIET_OPTIONS, "maya")])
    assert len(LONG_MESSAGE) > 6 * 10_000
    assert whole.reader_version == reader.version  # a message that fits is shown whole, as before
    assert long.top == "yes" and long.reader_version == f"{reader.version}-excerpt-{EXCERPT_VERSION}"
    shown = server.requests[1]["body"]["messages"][-1]["content"]
    assert "peanut" in shown and "…" in shown and len(shown) < MAX_MESSAGE_CHARS + 500
    assert many[0].top == "yes" and all(r.reader_version.endswith(f"-excerpt-{EXCERPT_VERSION}") for r in many)


@settings(max_examples=60, deadline=None)
@given(sentences=st.lists(st.text(alphabet="abcdefgh ", min_size=1, max_size=120), min_size=1, max_size=80),
       where=st.integers(min_value=0, max_value=79), limit=st.integers(min_value=200, max_value=2000))
def test_an_excerpt_fits_its_limit_keeps_the_message_order_and_holds_the_best_sentence(sentences, where, limit):
    from doxa.inference.agent.reader_prompts import PIECE_CHARS, excerpt

    sentences = [" ".join(s.split()) or "a" for s in sentences]
    sentences.insert(min(where, len(sentences)), "Maya keeps a zebra called Stripes.")
    text = ". ".join(sentences) + "."
    shown, cut = excerpt(text, "What pet does Maya keep? zebra", limit)
    if len(text) <= limit:
        assert (shown, cut) == (text, False)
        return
    assert cut and len(shown) <= limit + 2  # the pieces and their separators, and a closing "…"
    parts = [p for p in shown.split(" … ") if p.strip("… ")]
    positions = [text.find(p.strip("… ")) for p in parts]
    assert all(x >= 0 for x in positions) and positions == sorted(positions)  # verbatim, in order
    if limit >= PIECE_CHARS:
        assert "zebra" in shown
