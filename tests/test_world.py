"""The embedded offline world: determinism, ids, answerability, retrievability, scaling and I/O."""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter

import pytest

from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders.common_knowledge import common_knowledge_examples
from data_builders.world import World, WorldConfig, build_world, main, scale_passages, write_world
from data_builders.world_names import NameGen


@pytest.fixture(scope="module")
def world() -> World:
    return build_world(WorldConfig(seed=0))


def _dump(world: World) -> list:
    return [[p.to_dict() for p in world.passages],
            [q.to_dict() for q in world.single_hop + world.two_hop + world.common_knowledge]]


def _common_knowledge_passages() -> list[Passage]:
    return [ex.gold_passages[0] for ex in common_knowledge_examples()]


def _questions(world: World) -> list[QAExample]:
    return world.single_hop + world.two_hop + world.common_knowledge


def test_same_seed_same_world_different_seed_different(world):
    assert _dump(build_world(WorldConfig(seed=0))) == _dump(world)
    other = build_world(WorldConfig(seed=1))
    assert [p.text for p in other.passages[:50]] != [p.text for p in world.passages[:50]]
    assert [q.question for q in other.single_hop] != [q.question for q in world.single_hop]


def test_default_sizes(world):
    assert 300 <= len(world.passages) <= 600
    assert len(world.single_hop) == 300
    assert len(world.two_hop) == 150
    assert len(world.common_knowledge) >= 150
    hops = Counter(q.metadata["hop_type"] for q in world.two_hop)
    assert hops == {"bridge": 100, "comparison": 50}


def test_ids_and_names_unique(world):
    ids = [p.id for p in world.passages]
    assert len(ids) == len(set(ids))
    qids = [q.id for q in _questions(world)]
    assert len(qids) == len(set(qids))
    names = [e.name.lower() for e in world.entities]
    assert len(names) == len(set(names))
    assert {p.title.lower() for p in _common_knowledge_passages()}.isdisjoint(names)
    assert re.fullmatch(r"world-p-\d{5}", world.passages[12].id)
    assert world.single_hop[3].id == "world-q-single-0003"


def test_name_tokens_are_not_near_duplicates(world):
    # Strict mode: no two invented tokens within edit distance 1 (one deletion from either side).
    tokens = {t.lower() for e in world.entities for t in e.name.split() if len(t) > 3}
    generic = {"university", "institute", "technology", "college", "collective", "letters", "songs", "last",
               "winter", "affair", "beyond", "house", "season", "variations", "river", "prize", "medal", "award"}
    invented = [t for t in tokens if t not in generic and not any(t.startswith(s.lower()) for s in (
        "Records", "Music", "Press", "Books", "Shipping", "Maritime", "Software", "Systems", "Textiles", "Mills",
        "Brewer", "Aeronautics", "Airways", "Pharma", "Laboratories", "Mining", "Minerals", "Motors", "Automotive",
        "Bank", "Capital"))]
    seen: dict[str, str] = {}
    for token in sorted(invented):
        for variant in {token} | {token[:i] + token[i + 1:] for i in range(len(token))}:
            assert seen.setdefault(variant, token) == token, f"{token!r} is near {seen[variant]!r}"


def test_every_answer_is_in_a_gold_passage(world):
    for q in _questions(world):
        assert q.gold_passages, q.id
        texts = [g.text.lower() for g in q.gold_passages]
        assert any(q.answers[0].lower() in t for t in texts), (q.id, q.question, q.answers)


def test_gold_passages_are_corpus_passages(world):
    corpus = {p.id: p for p in world.passages}
    for q in _questions(world):
        for g in q.gold_passages:
            assert corpus[g.id] == g


def test_two_hop_structure(world):
    corpus = {p.id for p in world.passages}
    for q in world.two_hop:
        ids = [g.id for g in q.gold_passages]
        assert len(ids) == 2 and len(set(ids)) == 2 and set(ids) <= corpus, q.id
        md = q.metadata
        assert md["source"] == "world" and md["kind"] == "fictional"
        if md["hop_type"] == "bridge":
            assert md["entity"] in q.question and md["intermediate"] == q.gold_passages[1].title
            assert md["intermediate"] not in q.question  # the second hop must be found, not read
            assert q.answers[0].lower() in q.gold_passages[1].text.lower()
        else:
            assert md["hop_type"] == "comparison"
            assert all(name in q.question for name in md["entities"])
            assert q.answers[0] in md["entities"]


def test_single_hop_metadata_and_full_names(world):
    for q in world.single_hop:
        assert q.metadata["source"] == "world" and q.metadata["hop_type"] == "single"
        assert q.metadata["kind"] == "fictional"
        assert len(q.gold_passages) == 1 and q.gold_passages[0].title == q.metadata["entity"]
        assert q.metadata["entity"] in q.question
    assert len({q.metadata["relation"] for q in world.single_hop}) >= 20


def test_distractors_are_never_gold(world):
    distractors = {e.pid for e in world.entities if not e.core}
    assert len(distractors) >= world.config.n_distractors
    gold = {g.id for q in _questions(world) for g in q.gold_passages}
    assert gold.isdisjoint(distractors)


def test_world_is_coherent(world):
    # Dates must not contradict each other, or a reader model learns nonsense from the gold passages.
    for ent in world.entities:
        a = ent.attrs
        if ent.kind == "person" and a["death_year"]:
            assert a["birth_year"] + 55 <= a["death_year"] <= 2022
            assert a["award_year"] is None or a["award_year"] <= a["death_year"]
        if ent.kind == "company":
            assert a["founded"] > a["founder"].attrs["birth_year"] + 20
        if ent.kind == "book" and a["publisher"]:
            assert a["publisher"].attrs["founded"] <= a["year"]
        if ent.kind == "album":
            assert a["year"] >= a["artist"].attrs["formed"]
            assert a["label"] is None or a["label"].attrs["founded"] <= a["year"]
        if ent.kind == "country":
            assert a["capital"].attrs["country"] is ent and a["capital"].attrs["is_capital"]
        if ent.core:
            assert all(v.core for v in a.values() if hasattr(v, "core")), ent.name


def test_passage_lengths(world):
    for p in world.passages:
        if not p.id.startswith("world-p-ck-"):
            assert 40 <= len(p.text.split()) <= 120, (p.id, p.text)


def test_common_knowledge():
    examples = common_knowledge_examples()
    assert len(examples) >= 150
    assert len({q.question for q in examples}) == len(examples)
    for q in examples:
        assert q.metadata == {"source": "world", "hop_type": "single", "kind": "common"}
        assert len(q.gold_passages) == 1 and q.gold_passages[0].id.startswith("world-p-ck-")
        sentences = len(re.findall(r"(?<![A-Z])\.(?: |$)", q.gold_passages[0].text))  # "J. K. Rowling" is not three
        assert 1 <= sentences <= 2, q.gold_passages[0].text
    assert [q.to_dict() for q in examples] == [q.to_dict() for q in common_knowledge_examples()]


def test_common_knowledge_passages_are_in_the_world(world):
    ids = {p.id for p in world.passages}
    assert {p.id for p in _common_knowledge_passages()} <= ids
    assert [q.to_dict() for q in world.common_knowledge] == [q.to_dict() for q in common_knowledge_examples()]
    assert build_world(WorldConfig(include_common=False)).common_knowledge == []


def _bm25_top(passages: list[Passage], queries: list[str], k: int) -> list[list[str]]:
    """A plain BM25 (k1=0.9, b=0.4, Pyserini's defaults) over title + text, for the retrievability check."""
    def toks(s: str) -> list[str]:
        return re.findall(r"\w+", s.lower())

    tfs = [Counter(toks(p.contents)) for p in passages]
    lengths = [sum(tf.values()) for tf in tfs]
    avg = sum(lengths) / len(lengths)
    df = Counter(w for tf in tfs for w in tf)
    idf = {w: math.log(1 + (len(tfs) - d + 0.5) / (d + 0.5)) for w, d in df.items()}
    out = []
    for query in queries:
        terms = set(toks(query))
        scores = [sum(idf[w] * tf[w] * 1.9 / (tf[w] + 0.9 * (0.6 + 0.4 * n / avg)) for w in terms if w in tf)
                  for tf, n in zip(tfs, lengths)]
        top = sorted(range(len(passages)), key=lambda i: -scores[i])[:k]
        out.append([passages[i].id for i in top])
    return out


def test_single_hop_gold_is_retrievable_with_bm25(world):
    questions = world.single_hop[:150]
    tops = _bm25_top(world.passages, [q.question for q in questions], 3)
    hits = sum(q.gold_passages[0].id in top for q, top in zip(questions, tops))
    assert hits / len(questions) >= 0.8


def test_scale_passages_100k_unique_and_stable(world):
    # Speed is measured in bench/retrieval.py, never asserted here.
    passages = scale_passages(world, 100_000)
    assert len(passages) >= 100_000
    assert len({p.id for p in passages}) == len(passages)
    assert len({p.title.lower() for p in passages if not p.id.startswith("world-p-ck-")}) == len(
        [p for p in passages if not p.id.startswith("world-p-ck-")])
    assert passages[: len(world.passages)] == world.passages
    for n in (2_000, 3_517):  # deterministic, exactly n, and a prefix of a larger corpus
        assert scale_passages(world, n) == passages[:n]
    assert scale_passages(world, 10) == world.passages
    lengths = [len(p.text.split()) for p in passages[len(world.passages):]]
    assert min(lengths) >= 40 and max(lengths) <= 120


def test_write_world_round_trips(world, tmp_path):
    out = write_world(world, tmp_path / "w")
    files = {"corpus": world.passages, "single_hop": world.single_hop, "two_hop": world.two_hop,
             "common_knowledge": world.common_knowledge}
    for name, expected in files.items():
        lines = (out / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
        cls = Passage if name == "corpus" else QAExample
        assert [cls.from_dict(json.loads(line)) for line in lines] == expected
    assert json.loads((out / "world_config.json").read_text())["seed"] == 0


def test_write_world_bytes_are_one_json_object_per_line(world, tmp_path):
    """write_world goes through readers' atomic JSONL writers; the files keep their exact bytes (non-ASCII kept
    as is, one ``json.dumps`` per line) and no temporary file is left beside them."""
    out = write_world(world, tmp_path / "w")
    files = {"corpus": world.passages, "single_hop": world.single_hop, "two_hop": world.two_hop,
             "common_knowledge": world.common_knowledge}
    for name, rows in files.items():
        expected = "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
        assert (out / f"{name}.jsonl").read_bytes() == expected, name
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{n}.jsonl" for n in files] + ["world_config.json"])


def test_cli_writes_the_world(tmp_path, capsys):
    main(["--out", str(tmp_path), "--seed", "3", "--scale", "1000"])
    assert "1000 passages" in capsys.readouterr().out
    corpus = (tmp_path / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(corpus) == 1000
    assert all(set(json.loads(line)) == {"id", "title", "text"} for line in corpus)
    assert (tmp_path / "two_hop.jsonl").exists() and (tmp_path / "common_knowledge.jsonl").exists()


def test_small_world_builds():
    small = build_world(WorldConfig(seed=5, n_people=5, n_places=2, n_orgs=3, n_works=3, n_distractors=4))
    assert small.single_hop and small.two_hop
    for q in small.single_hop + small.two_hop:
        assert any(q.answers[0].lower() in g.text.lower() for g in q.gold_passages)


@pytest.mark.parametrize("field", ["n_people", "n_places", "n_orgs", "n_works"])
def test_config_rejects_too_small_worlds(field):
    with pytest.raises(ValueError, match=f"WorldConfig.{field} must be >="):
        WorldConfig(**{field: 1})


def test_config_rejects_negative_counts():
    with pytest.raises(ValueError, match="WorldConfig.n_bridge must be >= 0"):
        WorldConfig(n_bridge=-1)


def test_name_generator_is_seeded_and_unique():
    def draw(seed: int) -> list[str]:
        gen = NameGen(random.Random(seed))
        return [gen.name(["first", "surname"], "{} {}") for _ in range(20)]

    assert draw(7) == draw(7) != draw(8)
    assert len(set(draw(7))) == 20
    gen = NameGen(random.Random(1), strict=False)
    names = [gen.token("place") for _ in range(5000)]
    assert len(set(names)) == 5000
