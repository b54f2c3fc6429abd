"""How fast `doxa context` answers on a large store, in-process.

Builds (vectorised: numpy columns → Arrow tables → one bulk insert, then the term index
in SQL) a store of 1,000 subjects, 20,000 questions and their messages and readings,
then times :func:`doxa.inference.agent.context.context` over many different tasks and prints
the median, p95 and max. Target: median ≤ 50 ms.

    .venv/bin/python bench/context_scale.py                       # 1,000 subjects, 20 questions each
    .venv/bin/python bench/context_scale.py --tasks 500 --readings 5 --db /tmp/ctx.duckdb

Timing excludes process start-up and the first (warm-up) call; reads are logged, as in
normal use (``--no-log`` turns that off).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

FIRST = ("Ada Bela Cai Dara Eli Faye Gus Hana Ivo Jun Kai Lena Milo Nia Omar Pia Quin Rosa Sami Tara Uma "
         "Vik Wren Xena Yuri Zoe Abel Bo Cleo Dov Ema Finn Gia Hugo Iris Jonas Kira Leo Mira Noor").split()
LAST = ("Okafor Lind Tanaka Moreau Silva Novak Berg Costa Haddad Ivanova Jensen Kowalski Larsen Mendes Nakamura "
        "Olsen Petrov Quint Rossi Sato Torres Ueda Varga Weber Xu Yilmaz Zeller Abbas Brandt Chen").split()
RELATIONS = ("partner", "sibling", "friend", "colleague", "parent")
LAYERS = (("person", "self", "chat"), ("person", "self", "social"), ("family", "about-other", "chat"),
          ("user", "notes"), ("business", "about-other", "email", "marketing"), ("friend", "about-other", "chat"))
#: (kind, question template, options, words a message about it uses)
KINDS = [
    ("diet", "What does {n} eat?", ["vegetarian", "eats fish", "eats meat"], "meat fish veggie lunch dinner cook"),
    ("home_address", "Where does {n} live?", ["city centre", "suburbs", "countryside"], "moved flat house street"),
    ("favourite_flower", "Which flowers does {n} like best?", ["lilies", "tulips", "roses", "peonies"],
     "bouquet flowers garden smell"),
    ("likes_loud_places", "Does {n} enjoy loud restaurants and bars?", ["yes", "no"], "loud bar noise music"),
    ("birthday_month", "In which month is {n}'s birthday?", ["spring", "summer", "autumn", "winter"],
     "birthday party cake"),
    ("coffee", "How does {n} take coffee?", ["black", "with milk", "no coffee"], "coffee espresso milk cafe"),
    ("pets", "Does {n} have a pet?", ["dog", "cat", "none"], "dog cat walk vet"),
    ("sport", "Which sport does {n} play?", ["tennis", "football", "none"], "match training court pitch"),
    ("job", "Where does {n} work?", ["office", "home", "hospital"], "work office shift commute"),
    ("car", "Does {n} drive?", ["yes", "no"], "car drive licence parking"),
    ("allergy", "Is {n} allergic to nuts?", ["yes", "no"], "allergic nuts peanut reaction"),
    ("music", "What music does {n} like?", ["jazz", "rock", "classical"], "concert album band playlist"),
    ("wine", "Which wine does {n} prefer?", ["red", "white", "none"], "wine bottle glass vineyard"),
    ("travel", "Where is {n} travelling next?", ["Lisbon", "Tokyo", "nowhere"], "trip flight holiday hotel"),
    ("language", "Which language is {n} learning?", ["Spanish", "Japanese", "none"], "lesson class vocabulary"),
    ("shoe_size", "What is {n}'s shoe size?", ["38", "40", "42", "44"], "shoes size trainers boots"),
    ("phone", "Which phone does {n} use?", ["android", "iphone"], "phone screen charger app"),
    ("sleep", "Is {n} an early riser?", ["yes", "no"], "morning alarm sleep early"),
    ("gift", "What gift would {n} like?", ["book", "experience", "gadget"], "gift present wishlist surprise"),
    ("kids", "Does {n} have children?", ["yes", "no"], "kids school nursery son daughter"),
    ("spicy", "Does {n} like spicy food?", ["yes", "no"], "spicy chilli curry hot"),
    ("tea", "Which tea does {n} drink?", ["green", "black", "herbal"], "tea kettle mug"),
    ("gym", "Does {n} go to the gym?", ["yes", "no"], "gym workout weights class"),
    ("film", "Which films does {n} like?", ["comedy", "drama", "horror"], "film cinema movie screening"),
    ("book_genre", "What does {n} like to read?", ["novels", "history", "poetry"], "reading library novel"),
    ("weekend", "What does {n} do at weekends?", ["hiking", "gaming", "family"], "weekend saturday sunday"),
    ("anniversary", "When is {n}'s anniversary?", ["spring", "summer", "autumn", "winter"],
     "anniversary wedding celebrate"),
    ("dessert", "Which dessert does {n} like?", ["chocolate", "fruit", "cheese"], "dessert cake sweet pudding"),
    ("transport", "How does {n} get to work?", ["bike", "train", "car"], "bike train bus commute"),
    ("colour", "What is {n}'s favourite colour?", ["blue", "green", "red"], "colour paint wear"),
    ("hobby", "What is {n}'s hobby?", ["painting", "chess", "gardening"], "hobby club weekend"),
    ("noise", "Does {n} mind noise at home?", ["yes", "no"], "noise neighbours quiet"),
    ("vacation_style", "What holidays does {n} like?", ["beach", "city", "mountains"], "holiday beach hiking city"),
    ("breakfast", "What does {n} eat for breakfast?", ["cereal", "eggs", "nothing"], "breakfast morning toast"),
    ("restaurant", "Which restaurant does {n} like?", ["Italian", "Thai", "Indian"], "restaurant table booking dinner"),
    ("social", "Is {n} on social media?", ["yes", "no"], "post photo followers"),
    ("plants", "Does {n} keep plants?", ["yes", "no"], "plants water pots"),
    ("cooking", "Does {n} like to cook?", ["yes", "no"], "cook recipe kitchen"),
    ("instrument", "Does {n} play an instrument?", ["piano", "guitar", "none"], "piano guitar practice"),
    ("city_born", "Where was {n} born?", ["north", "south", "abroad"], "born grew hometown"),
]
FILLER = ("the a and then today yesterday really great again maybe think said told remember so very just "
          "week night last next soon always never love hate fine okay lovely").split()
TASKS = ("book {n}'s birthday dinner", "send flowers to {n}", "plan a weekend trip with {n}",
         "buy a gift for {n}", "invite {n} and {m} for coffee", "arrange a restaurant table for {n}'s anniversary",
         "pick wine for dinner with {n}", "what should I cook for {n}", "call {n} about the move",
         "organise a surprise party for {n}")


def build(path: str, n_subjects: int, per_subject: int, readings: int, seed: int = 7) -> dict[str, int]:
    from doxa.data.insert import insert_arrow
    from doxa.data.store import Store

    rng = np.random.default_rng(seed)
    pairs = rng.permutation(len(FIRST) * len(LAST))[:n_subjects]
    first = np.array(FIRST, dtype=object)[pairs % len(FIRST)]
    last = np.array(LAST, dtype=object)[pairs // len(FIRST)]
    names = first + " " + last
    ids = np.array([f"p{i:04d}" for i in range(n_subjects)], dtype=object)
    aliases = [[f"{f} {l[0]}."] for f, l in zip(first, last)]

    # relations: each subject points at two others
    rel_from = np.repeat(ids, 2)
    rel_to = ids[(np.repeat(np.arange(n_subjects), 2) + rng.integers(1, n_subjects, 2 * n_subjects)) % n_subjects]
    rel_kind = np.array(RELATIONS, dtype=object)[rng.integers(0, len(RELATIONS), 2 * n_subjects)]
    keep = np.unique(np.stack([rel_from, rel_to, rel_kind]).astype(str), axis=1, return_index=True)[1]

    # sources
    n_sources = 40
    layer_of = rng.integers(0, len(LAYERS), n_sources)
    source_ids = np.array([f"src{i:02d}" for i in range(n_sources)], dtype=object)
    source_layers = [list(LAYERS[j]) for j in layer_of]

    # questions: per subject a random subset of the kinds
    per_subject = min(per_subject, len(KINDS))
    kind_idx = np.argsort(rng.random((n_subjects, len(KINDS))), axis=1)[:, :per_subject].ravel()
    q_subject = np.repeat(np.arange(n_subjects), per_subject)
    kinds = np.array([k[0] for k in KINDS], dtype=object)
    q_ids = ids[q_subject] + "." + kinds[kind_idx]
    q_text = np.array([KINDS[k][1].format(n=names[s]) for s, k in zip(q_subject, kind_idx)], dtype=object)
    q_k = np.array([len(k[2]) for k in KINDS])[kind_idx]
    n_q = len(q_ids)

    # messages and readings: `readings` per question
    m_q = np.repeat(np.arange(n_q), readings)
    n_m = len(m_q)
    m_ids = np.array([f"m{i:06d}" for i in range(n_m)], dtype=object)
    m_source = source_ids[rng.integers(0, n_sources, n_m)]
    days = rng.integers(0, 1500, n_m)
    sent_at = np.datetime64("2022-01-01") + days.astype("timedelta64[D]")
    words = [KINDS[k][3].split() for k in range(len(KINDS))]
    first_of = first[q_subject[m_q]]
    topic = [words[k][rng.integers(0, len(words[k]))] for k in kind_idx[m_q]]
    fill = np.array(FILLER, dtype=object)[rng.integers(0, len(FILLER), (n_m, 3))]
    text = first_of + " " + fill[:, 0] + " " + np.array(topic, dtype=object) + " " + fill[:, 1] + " " + fill[:, 2]
    k_of = q_k[m_q]
    alpha = np.where(np.arange(4)[None, :] < k_of[:, None], 1.0, 1e-9)
    raw = rng.gamma(alpha)
    u = rng.uniform(0.0, 0.2, n_m)
    probs = raw / raw.sum(axis=1, keepdims=True) * (1 - u)[:, None]
    flat = probs[np.arange(4)[None, :] < k_of[:, None]]  # row-major: each reading's K values in order
    offsets = np.r_[0, np.cumsum(k_of)].astype(np.int32)

    options_flat = np.concatenate([KINDS[k][2] for k in kind_idx]).astype(object)
    q_offsets = np.r_[0, np.cumsum(q_k)].astype(np.int32)

    # instructions: one per 10 subjects, resting on their loud-places or diet question when they have one
    ins_subject = np.arange(0, n_subjects, 10)
    tables = {
        "subjects": pa.table({"id": ids.astype(str), "name": names.astype(str),
                              "aliases": pa.array(aliases, pa.list_(pa.string()))}),
        "relations": pa.table({"from_id": rel_from[keep].astype(str), "to_id": rel_to[keep].astype(str),
                               "kind": rel_kind[keep].astype(str)}),
        "sources": pa.table({"id": source_ids.astype(str), "layers": pa.array(source_layers, pa.list_(pa.string())),
                             "path": ["/".join([*ly, s]) for ly, s in zip(source_layers, source_ids)],
                             "trust": pa.nulls(n_sources, pa.float64()),
                             "is_assistant": np.zeros(n_sources, dtype=bool)}),
        "questions": pa.table({"id": q_ids.astype(str), "subject": ids[q_subject].astype(str),
                               "kind": kinds[kind_idx].astype(str), "text": q_text.astype(str),
                               "shape": np.where(q_k == 2, "yes_no", "choice"),
                               "options": pa.ListArray.from_arrays(pa.array(q_offsets),
                                                                   pa.array(options_flat.astype(str)))}),
        "messages": pa.table({"id": m_ids.astype(str), "source": m_source.astype(str),
                              "sent_at": pa.array(sent_at.astype("datetime64[us]")),
                              "received_at": pa.array(sent_at.astype("datetime64[us]")),
                              "text": text.astype(str), "fingerprint": m_ids.astype(str)}),
        "readings": pa.table({"message": m_ids.astype(str), "question": q_ids[m_q].astype(str),
                              "reader": np.full(n_m, "bench-reader"), "reader_version": np.full(n_m, ""),
                              "probs": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat)),
                              "unclear": u, "unrelated": np.zeros(n_m), "one_off": np.zeros(n_m)}),
    }
    loud = {s: q for s, q in zip(q_subject, q_ids) if q.endswith(".likes_loud_places")}
    tables["instructions"] = pa.table({
        "id": [f"ins{s}" for s in ins_subject], "subject": ids[ins_subject].astype(str),
        "text": [f"Avoid loud restaurants for {names[s]}" for s in ins_subject],
        "given_at": pa.array(np.full(len(ins_subject), np.datetime64("2024-01-01", "us"))),
        "rests_on_question": pa.array([loud.get(s) for s in ins_subject], pa.string()),
        "rests_on_answer": pa.array(["no" if s in loud else None for s in ins_subject], pa.string())})
    store = Store.open(path)
    try:
        counts = insert_arrow(store, tables)
    finally:
        store.close()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subjects", type=int, default=1000)
    parser.add_argument("--questions-per-subject", type=int, default=20)
    parser.add_argument("--readings", type=int, default=3, help="messages (one reading each) per question")
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--db", default=None, help="store path (default: a temporary file)")
    parser.add_argument("--no-log", action="store_true", help="do not log reads")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads (default: DuckDB's, one per core)")
    args = parser.parse_args()

    from doxa.data.store import Store
    from doxa.inference.agent.context import context
    from doxa.inference.read.memory import Memory

    tmp = tempfile.TemporaryDirectory() if args.db is None else None
    path = args.db or str(Path(tmp.name) / "context_scale.duckdb")
    if Path(path).exists():
        raise SystemExit(f"{path} exists: give a new --db path")
    start = time.perf_counter()
    counts = build(path, args.subjects, args.questions_per_subject, args.readings, args.seed)
    built = time.perf_counter() - start
    print(f"built {path} in {built:.1f} s: " + ", ".join(f"{n:,} {t}" for t, n in counts.items()))

    mem = Memory(Store.open(path), log_reads=not args.no_log)
    if args.threads:
        mem.store.con.execute(f"SET threads = {int(args.threads)}")
    names = [r[0] for r in mem.store.con.execute("SELECT name FROM subjects ORDER BY id").fetchall()]
    rng = np.random.default_rng(args.seed + 1)
    tasks = []
    for _ in range(args.tasks):
        template = TASKS[rng.integers(0, len(TASKS))]
        a, b = rng.choice(len(names), 2, replace=False)
        tasks.append(template.format(n=names[a], m=names[b]))
    context(mem, tasks[0])  # warm-up: first query plans, caches
    times, cpu, n_questions, n_subjects, n_conflicts = [], [], [], [], 0
    for task in tasks:
        t0, c0 = time.perf_counter(), time.process_time()
        ctx = context(mem, task)
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        n_questions.append(len(ctx.questions) + ctx.truncated)
        n_subjects.append(len(ctx.subjects))
        n_conflicts += len(ctx.conflicts)
    mem.close()
    times_arr = np.array(times)
    print(f"context() over {len(tasks)} tasks (reads {'not ' if args.no_log else ''}logged): "
          f"median {statistics.median(times):.1f} ms, p95 {np.percentile(times_arr, 95):.1f} ms, "
          f"max {times_arr.max():.1f} ms")
    # CPU time of this process (DuckDB's threads included): what the wall time would be on an
    # otherwise idle machine; on a shared one the wall time can be several times larger.
    print(f"CPU time per task: median {statistics.median(cpu):.1f} ms, p95 {np.percentile(cpu, 95):.1f} ms")
    print(f"per task: {np.mean(n_subjects):.1f} subjects (named + one hop), {np.mean(n_questions):.1f} candidate "
          f"questions, {n_conflicts} instruction conflicts in all")
    verdict = "meets" if statistics.median(times) <= 50 else "misses"
    print(f"target median ≤ 50 ms: {verdict}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
