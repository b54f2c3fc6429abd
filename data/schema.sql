-- doxa store schema: the one place tables are defined (DESIGN.md §1).
-- Times are TIMESTAMP (UTC, naive). Lists are DuckDB lists.

-- The row 'schema_version' marks a DuckDB file as a doxa store: a file holding tables without
-- it is never changed (data/store.py). 'store_id' (random hex) names the store's files in a
-- folder several stores share; 'evidence_epoch' and 'structure_epoch' date what kept states saw.
CREATE TABLE IF NOT EXISTS meta (
    key   VARCHAR PRIMARY KEY,
    value VARCHAR
);

CREATE TABLE IF NOT EXISTS subjects (
    id         VARCHAR PRIMARY KEY,
    name       VARCHAR NOT NULL,
    aliases    VARCHAR[] NOT NULL DEFAULT [],
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp
);

CREATE TABLE IF NOT EXISTS relations (
    from_id VARCHAR NOT NULL,
    to_id   VARCHAR NOT NULL,
    kind    VARCHAR NOT NULL,
    PRIMARY KEY (from_id, to_id, kind)
);

-- path = layers joined by '/' plus the source id as the leaf.
CREATE TABLE IF NOT EXISTS sources (
    id           VARCHAR PRIMARY KEY,
    layers       VARCHAR[] NOT NULL,
    path         VARCHAR NOT NULL,
    trust        DOUBLE,
    is_assistant BOOLEAN NOT NULL
);

-- Evidence: immutable. fingerprint groups copies into one evidence unit.
CREATE TABLE IF NOT EXISTS messages (
    id          VARCHAR PRIMARY KEY,
    source      VARCHAR NOT NULL,
    sent_at     TIMESTAMP NOT NULL,
    received_at TIMESTAMP NOT NULL,
    text        VARCHAR NOT NULL,
    fingerprint VARCHAR NOT NULL
);

-- Questions are written by the organizer; they carry no probability.
CREATE TABLE IF NOT EXISTS questions (
    id         VARCHAR PRIMARY KEY,
    subject    VARCHAR,
    kind       VARCHAR NOT NULL,
    text       VARCHAR NOT NULL,
    shape      VARCHAR NOT NULL,
    options    VARCHAR[] NOT NULL,
    status     VARCHAR NOT NULL DEFAULT 'active',   -- active | merged | split | withdrawn
    created_by VARCHAR NOT NULL DEFAULT 'organizer',
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    -- the version of the organizer's instructions (prompts 'organizer') a model created it under;
    -- NULL when a person or a file wrote it
    instructions_version INTEGER,
    -- an open (value) question: its options are the values the evidence has named so far, in the
    -- order they were added (append only), and beliefs keep a remainder on "unlisted"
    is_open    BOOLEAN NOT NULL DEFAULT false
);

-- probs are in the order of questions.options. For an open question, probs covers the options
-- listed when the reading was written (later ones are past its end) and holds NaN for an option it
-- does not name; unlisted is its mass on "states a value that is not listed" (0 on closed questions).
-- sent_at, source, fp and counts copy (immutable) facts of the reading's message so that
-- loading the evidence never joins a million readings to their messages; is_copy says whether
-- an earlier message shares its fingerprint. Write paths fill them with
-- doxa.data.writer.complete_readings and settle_copies before committing.
CREATE TABLE IF NOT EXISTS readings (
    message        VARCHAR NOT NULL,
    question       VARCHAR NOT NULL,
    reader         VARCHAR NOT NULL,
    reader_version VARCHAR NOT NULL DEFAULT '',
    probs          DOUBLE[] NOT NULL,
    unclear        DOUBLE NOT NULL,
    unrelated      DOUBLE NOT NULL,
    one_off        DOUBLE NOT NULL,
    sent_at        TIMESTAMP,          -- the message's sent_at
    source         VARCHAR,            -- the message's source
    fp             UBIGINT,            -- hash of the message's fingerprint: copies share it
    counts         BOOLEAN,            -- false for the assistant's own notes
    is_copy        BOOLEAN,            -- an earlier message has its fingerprint (data/evidence.py mark_copies_sql)
    unlisted       DOUBLE NOT NULL DEFAULT 0,
    changed        DOUBLE NOT NULL DEFAULT 0,  -- the reader's probability the message reports a change
    PRIMARY KEY (message, question, reader)
);

CREATE TABLE IF NOT EXISTS settlements (
    question   VARCHAR NOT NULL,
    answer     VARCHAR NOT NULL,
    settled_at TIMESTAMP NOT NULL,
    how        VARCHAR NOT NULL,
    settled_by VARCHAR NOT NULL DEFAULT 'user',
    note       VARCHAR,            -- how the world showed it (an outcome's --how)
    p_before   DOUBLE,             -- what doxa said of the answer just before (what was approved)
    params_version INTEGER,        -- the parameter version p_before was computed with
    PRIMARY KEY (question, settled_at, answer)
);

CREATE TABLE IF NOT EXISTS rejections (
    question    VARCHAR NOT NULL,
    answer      VARCHAR NOT NULL,
    rejected_at TIMESTAMP NOT NULL,
    rejected_by VARCHAR NOT NULL DEFAULT 'user',
    PRIMARY KEY (question, answer, rejected_at)
);

-- Directives from the user: never beliefs, never evidence.
-- rests_on_* optionally name the belief the instruction presumes.
CREATE TABLE IF NOT EXISTS instructions (
    id                VARCHAR PRIMARY KEY,
    subject           VARCHAR,
    text              VARCHAR NOT NULL,
    given_at          TIMESTAMP NOT NULL,
    rests_on_question VARCHAR,
    rests_on_answer   VARCHAR,
    given_by          VARCHAR NOT NULL DEFAULT 'user'
);

-- One row per published parameter version; body is the JSON document the
-- scorer reads (data/params_document.py). A version is written in one transaction with
-- everything it owns (kept states, posterior file), so a row is never half a version.
CREATE TABLE IF NOT EXISTS params (
    version    INTEGER PRIMARY KEY,
    created_at TIMESTAMP NOT NULL DEFAULT current_timestamp,
    body       VARCHAR NOT NULL
);

-- The read log: append-only, no key, so logging 100,000 reads at once stays cheap.
-- probs has one entry per option, in the order of questions.options (never changed);
-- the view read_answers gives them as JSON {option: probability}.
CREATE TABLE IF NOT EXISTS reads (
    question       VARCHAR NOT NULL,
    asked_at       TIMESTAMP NOT NULL,     -- the --at time of the belief
    read_at        TIMESTAMP NOT NULL,     -- wall-clock time of the read
    probs          DOUBLE[] NOT NULL,
    top            VARCHAR NOT NULL,
    p_top          DOUBLE NOT NULL,
    params_version INTEGER
);

CREATE VIEW IF NOT EXISTS read_answers AS
    SELECT r.question, r.asked_at, r.read_at,
           to_json(map_from_entries(list_zip(q.options, r.probs)))::VARCHAR AS answers,
           r.top, r.p_top, r.params_version
    FROM reads r JOIN questions q ON q.id = r.question;

-- Organizer operations (merge, split, create): recorded so they can be undone and replayed.
CREATE TABLE IF NOT EXISTS organizer_ops (
    id       VARCHAR PRIMARY KEY,
    op       VARCHAR NOT NULL,
    body     VARCHAR NOT NULL,     -- JSON of the operation record
    done_by  VARCHAR NOT NULL,
    done_at  TIMESTAMP NOT NULL,
    undone   BOOLEAN NOT NULL DEFAULT false
);

-- Maintenance's proposals (`doxa organize --maintain`, data/maintenance.py): an organizer operation
-- found by rule, not yet done. record is the exact ingest record that applying it writes (JSON);
-- reasons JSON; the id comes from the questions it is about, so a rerun never proposes it twice.
CREATE TABLE IF NOT EXISTS proposed_ops (
    id          VARCHAR PRIMARY KEY,
    op          VARCHAR NOT NULL,     -- question_merge | question_split
    record      VARCHAR NOT NULL,
    reasons     VARCHAR NOT NULL,
    score       DOUBLE NOT NULL,
    proposed_at TIMESTAMP NOT NULL,
    proposed_by VARCHAR NOT NULL,
    status      VARCHAR NOT NULL DEFAULT 'proposed',   -- proposed | applied | dismissed
    decided_at  TIMESTAMP
);

-- The organizer's decisions (data/organizer_decisions.py): one row per organizer call that was applied,
-- keyed by the SHA-256 of its exact inputs (inference/agent/organizer_memory.py), so identical inputs
-- are answered from here with no model call, and a decision can be replayed under other instructions.
-- messages: the message ids decided (a window: its turns) — erasure deletes the rows naming one;
-- request and output are JSON; created and linked: the questions applying the output made and bore on.
CREATE TABLE IF NOT EXISTS organizer_decisions (
    key                  VARCHAR PRIMARY KEY,
    kind                 VARCHAR NOT NULL,      -- message | window
    messages             VARCHAR[] NOT NULL,
    instructions_version INTEGER,
    organizer            VARCHAR NOT NULL,
    model                VARCHAR NOT NULL,
    settings             VARCHAR NOT NULL,      -- JSON: the decoding settings in the key
    prompt               VARCHAR NOT NULL,      -- the request's prompt text, as sent
    request              VARCHAR NOT NULL,      -- JSON: the request (text, source, subjects and questions shown)
    shown                VARCHAR NOT NULL,      -- JSON: {"subjects": [ids], "questions": [ids]} shown
    reply                VARCHAR,               -- the raw reply read (NULL: an organizer without HTTP)
    output               VARCHAR NOT NULL,      -- JSON: the checked output applied
    created              VARCHAR[] NOT NULL DEFAULT [],
    linked               VARCHAR[] NOT NULL DEFAULT [],
    calls                INTEGER NOT NULL,
    prompt_tokens        INTEGER,
    completion_tokens    INTEGER,
    seconds              DOUBLE NOT NULL,
    created_at           TIMESTAMP NOT NULL
);

-- Full-text index over messages: one row per (message, term), built at ingest (BM25 in SQL).
CREATE TABLE IF NOT EXISTS message_terms (
    message VARCHAR NOT NULL,
    term    VARCHAR NOT NULL,
    tf      INTEGER NOT NULL
);

-- Versioned texts that decide how memory is organised and read (the organizer's instructions):
-- a new text is a new version, never an edit, so a change is a diff someone can read and roll back.
CREATE TABLE IF NOT EXISTS prompts (
    name    VARCHAR NOT NULL,      -- 'organizer'
    version INTEGER NOT NULL,
    text    VARCHAR NOT NULL,
    set_at  TIMESTAMP NOT NULL,
    set_by  VARCHAR NOT NULL,
    note    VARCHAR NOT NULL DEFAULT '',
    PRIMARY KEY (name, version)
);

-- Messages taken by `remember`: pending until the organizer and the reader have done their part
-- (no model was configured, or the caller asked to keep a message a model failed on).
CREATE TABLE IF NOT EXISTS remembered (
    message              VARCHAR PRIMARY KEY,
    status               VARCHAR NOT NULL,    -- pending | done
    waiting_for          VARCHAR,             -- while pending: 'organizer' or 'reader'
    reason               VARCHAR,             -- why it is pending
    organizer            VARCHAR,
    instructions_version INTEGER,
    reader               VARCHAR,
    questions            VARCHAR[] NOT NULL DEFAULT [],   -- the questions it was (or is to be) read for
    organizer_calls      INTEGER NOT NULL DEFAULT 0,
    reader_calls         INTEGER NOT NULL DEFAULT 0,
    updated_at           TIMESTAMP NOT NULL
);

-- Side files of the read log already folded into `reads` (data/read_log.py): a fold that
-- crashed after its commit never inserts a file twice. Holds only names of files on disk.
CREATE TABLE IF NOT EXISTS read_logs (
    name      VARCHAR PRIMARY KEY,
    folded_at TIMESTAMP NOT NULL
);

-- The epoch (meta 'evidence_epoch', one step per write that adds evidence) at which each
-- question's evidence last changed; meta 'structure_epoch' is the last merge, split or undo.
CREATE TABLE IF NOT EXISTS evidence_epochs (
    question VARCHAR PRIMARY KEY,
    epoch    BIGINT NOT NULL
);

-- Each question's forward-filter state after its last event (inference/states.py), under one
-- parameter version (0: the defaults), computed from the evidence as of `epoch`. A row
-- counts only while params_version is the newest, epoch >= the question's evidence epoch and
-- epoch >= the structure epoch; last_t is NULL (state = the prior) for a question without events.
CREATE TABLE IF NOT EXISTS belief_states (
    question       VARCHAR PRIMARY KEY,
    params_version INTEGER NOT NULL,
    epoch          BIGINT NOT NULL,
    last_t         DOUBLE,
    state          BLOB NOT NULL,       -- float64 values, one per option, bit for bit
    n_evidence     INTEGER NOT NULL,
    n_settled      INTEGER NOT NULL
);

-- Erasures (`doxa forget`): what was forgotten, when, by whom and why; never what it said. counts is
-- JSON {table: rows removed}. rewritten: the store file was rewritten after it, so the removed
-- bytes left the disk (false only when that rewrite failed: `doxa forget --rewrite` finishes it).
CREATE TABLE IF NOT EXISTS erasures (
    id         VARCHAR PRIMARY KEY,
    kind       VARCHAR NOT NULL,      -- message | source | subject
    target     VARCHAR NOT NULL,      -- the id forgotten
    erased_at  TIMESTAMP NOT NULL,
    erased_by  VARCHAR NOT NULL,
    reason     VARCHAR,
    counts     VARCHAR NOT NULL,
    rewritten  BOOLEAN NOT NULL DEFAULT false
);

-- Instruction search (`doxa organizer-instructions search`, data/instruction_search.py): one row per
-- search — its id is a hash of what it starts from (the active version, the cases, the models), so
-- a rerun resumes it — and one per candidate text it proposed: kept (beat its parent on held-out
-- cases), rejected (reason says why), activated (made a version), or pending (proposed, not scored).
CREATE TABLE IF NOT EXISTS instruction_searches (
    id           VARCHAR PRIMARY KEY,
    base_version INTEGER NOT NULL,     -- the active version it started from
    rounds_done  INTEGER NOT NULL DEFAULT 0,
    status       VARCHAR NOT NULL,     -- running | stopped | done
    stop_reason  VARCHAR,
    calls        INTEGER NOT NULL DEFAULT 0,   -- model calls spent over every run
    started_at   TIMESTAMP NOT NULL,
    updated_at   TIMESTAMP NOT NULL
);

CREATE TABLE IF NOT EXISTS instruction_candidates (
    id             VARCHAR PRIMARY KEY,      -- SEARCH:ROUND:POSITION
    search_id      VARCHAR NOT NULL,
    round          INTEGER NOT NULL,
    position       INTEGER NOT NULL,
    parent_version INTEGER NOT NULL,         -- the store's active version the search started from
    parent         VARCHAR,                  -- the candidate it revises (NULL: the active version)
    text           VARCHAR NOT NULL,
    scores         VARCHAR NOT NULL,         -- JSON: minibatch, held_out (means, paired difference, SE), pinned
    answered       VARCHAR NOT NULL,         -- JSON: {case id: 1 right | 0 wrong or invalid}
    diff           VARCHAR NOT NULL,         -- unified diff against its parent
    status         VARCHAR NOT NULL,         -- pending | kept | rejected | activated
    reason         VARCHAR,
    created_at     TIMESTAMP NOT NULL
);
