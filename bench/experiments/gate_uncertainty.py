"""Would a gate that ranks by the answerer's own uncertainty reach always retrieving? A diagnostic beside
``gate_operating.py``: the same operating curve and tuning-half threshold, with the decision's score replaced.

    python bench/experiments/gate_uncertainty.py \\
        --gate supervised=K/claims/adapt/model,G/supervised_ban,G/cause/eval/supervised/memory,G/ar_ban \\
        --tune supervised=G/cause/tune/supervised/gate,G/cause/tune/supervised/memory,G/cause/tune/supervised/ar \\
        --ar K/claims/adapt/ar --out G/cause/uncertainty.md

Each ``--gate NAME=MODEL,GATE,MEMORY,AR`` is a gate's model folder and three evaluation folders on the same questions,
as ``gate_operating.py`` takes them; ``--tune NAME=GATE,MEMORY,AR`` the same model's on the half that chooses. For every
question the model answers the gate's parametric prompt again, greedily, with ``<RET>`` banned, and the scores are
read from that answer's tokens (up to the end of its answer part, as the gate cuts it):

* ``1 − min p``: one minus the lowest probability of a chosen token (FLARE's signal);
* ``max entropy``: the highest entropy of a next-token distribution (nats).

Both are with ``<RET>`` banned, so the distribution is that of an answer. ``p(<RET>)`` (the gate's own score) is
listed beside them. Per score: its AUROC against the recorded ``unknown`` label, the curve's best accuracy at a
share at most ``--max_share`` on this half (a bound), and the threshold chosen on the tuning half applied here, with
paired intervals against the reference AR. The re-answers are checked against the recorded answers from memory
(``agree``): where the parametric answer was ``<RET>``, the recorded one came from the NR prompt.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from functools import cache
from pathlib import Path

from gate_operating import _ci, _diff, best_point, curve, decide, gate_answers
from grpo_arms import labels_of, per_question

from adaptive_rag.plumbing.bootstrap import auroc_ci

SCORES = ("p(<RET>)", "1 − min p", "max entropy")


def answer_scores(chosen_probs: list[float], entropies: list[float], vocab_size: int) -> dict[str, float]:
    """``1 − min p`` and ``max entropy`` of an answer from the probability of each chosen token and each step's
    entropy. An empty answer is as unsure as can be by both (1 and log of the vocabulary): with ``<RET>`` banned, a
    model that ends at once is where the gate would have retrieved."""
    if not chosen_probs:
        return {"1 − min p": 1.0, "max entropy": math.log(vocab_size)}
    return {"1 − min p": 1.0 - min(chosen_probs), "max entropy": max(entropies)}


def answer_length(texts: list[str]) -> int:
    """How many of the tokens (``texts``: the decoded text after each token) make up the answer part: up to a blank
    line or the Alpaca section marker, as ``response_text`` cuts it; 0 where the answer part is empty."""
    from data_builders.adapt_llm_prompts import SECTION_MARKER, response_text

    for n, text in enumerate(texts, 1):
        body = text.lstrip()
        if "\n\n" in body or SECTION_MARKER in body:
            # the token that ends the answer is not part of it; nor is any before it where the answer is empty
            return n - 1 if n > 1 and response_text(texts[n - 2]) else 0
    return len(texts)


def reanswer(model_dir: str, questions: dict[str, str], variant: str, batch_size: int = 16,
             max_new_tokens: int = 20) -> dict[str, dict]:
    """Each question's greedy answer to the parametric prompt with ``<RET>`` banned: its text, the token ids of its
    answer part (``tokens``) and its scores."""
    import torch
    from tqdm import tqdm
    from transformers import GenerationConfig

    from adaptive_rag.lm.models import ModelOptions, load_causal_lm
    from data_builders.adapt_llm_prompts import RET_TOKEN, parametric_prompt, response_text
    from inference.adapt_gate.ret_token import text_piece_ids

    model, tokenizer = load_causal_lm(model_dir, ModelOptions(device="cpu", dtype="float32"))
    # an added <RET> is one token. Plain-text <RET> (ret_token: text) is banned as its sequence of pieces, which
    # generate bans at its last piece: the model may still write its first pieces.
    banned = [[tokenizer.convert_tokens_to_ids(RET_TOKEN)]] if RET_TOKEN in tokenizer.get_vocab() \
        else [text_piece_ids(tokenizer)]
    # a fresh generation config: the scores are the logits with <RET> banned and nothing else the model's own
    # config might add (a repetition penalty would change the probabilities read)
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, output_scores=True,
                              return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=tokenizer.eos_token_id, bad_words_ids=banned)
    out, ids = {}, list(questions)
    for start in tqdm(range(0, len(ids), batch_size), desc=f"re-answer {Path(model_dir).name}", leave=False):
        chunk = ids[start:start + batch_size]
        enc = tokenizer([parametric_prompt(questions[i], variant) for i in chunk], return_tensors="pt", padding=True)
        with torch.no_grad():
            gen = model.generate(**enc, generation_config=config)
        logp = torch.stack(gen.scores, dim=1).float().log_softmax(-1)  # batch x steps x vocab; <RET> banned
        new = gen.sequences[:, enc["input_ids"].shape[1]:]
        chosen = logp.gather(-1, new[:, :logp.shape[1], None]).squeeze(-1).exp()
        ent = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)
        for row, qid in enumerate(chunk):
            tokens = new[row].tolist()
            if tokenizer.eos_token_id in tokens:
                tokens = tokens[:tokens.index(tokenizer.eos_token_id)]
            texts = [tokenizer.decode(tokens[:n + 1], skip_special_tokens=True) for n in range(len(tokens))]
            n = answer_length(texts) if tokens else 0
            out[qid] = {"id": qid, "answer": response_text(texts[n - 1] if n else ""), "tokens": tokens[:n],
                        **answer_scores(chosen[row, :n].tolist(), ent[row, :n].tolist(), logp.shape[-1])}
    return out


def scored(gate: dict, answers: dict[str, dict], score: str) -> dict:
    """The gate's rows with ``score`` as the decision score (``p(<RET>)``: the gate's own)."""
    if score == "p(<RET>)":
        return gate
    return {i: {**row, "score": answers[i][score]} for i, row in gate.items() if i in answers}


@cache
def _memory_run(memory: Path):
    """The evaluation run answering from memory, read once: the re-answer and the agreement both read it."""
    from inference.commands.report import load_eval_run

    return load_eval_run(memory, memory.name)


def load_or_answer(path: Path, model_dir: str, memory: Path, batch_size: int) -> dict[str, dict]:
    """The re-answers of ``memory``'s questions, cached in ``path`` (JSON lines) so a rerun reads them. Beside it,
    ``path.meta.json`` records what they answered; a cache for another model, other questions or other settings is
    refused rather than read (a rebuilt world keeps its folder names)."""
    run = _memory_run(memory)
    questions = {rec.id: rec.question for rec in run.records()}
    # the gate's recorded settings: the parametric prompt and the answer's budget it was evaluated with
    variant = run.config.get("gate_prompt_variant") or "paper"
    max_new_tokens = int(run.config.get("gate_max_new_tokens") or 20)
    meta = {"model": str(Path(model_dir).resolve()), "prompt_variant": variant, "max_new_tokens": max_new_tokens,
            "questions": hashlib.sha256(json.dumps(questions, sort_keys=True).encode()).hexdigest()}
    meta_path = path.with_suffix(".meta.json")
    if path.is_file():
        if not meta_path.is_file() or json.loads(meta_path.read_text()) != meta:
            raise ValueError(f"{path}: re-answers cached for another model, questions or settings (see "
                             f"{meta_path.name}); delete it to answer again")
        return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    answers = reanswer(model_dir, questions, variant, batch_size, max_new_tokens)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in answers.values()))
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    return answers


def agreement(answers: dict[str, dict], memory: Path) -> str:
    """How many re-answers equal the recorded answers from memory, of the questions both have, split by the prompt
    that gave the recorded answer: the parametric one, or the NR prompt where the parametric answer was ``<RET>``."""
    recs = {rec.id: rec for rec in _memory_run(memory).records()}
    both = [i for i in answers if i in recs]
    by_nr = {i for i in both if recs[i].gate is not None and recs[i].gate.answered_by == "closed_book"}
    same = {i for i in both if answers[i]["answer"] == recs[i].output.strip()}
    return (f"{len(same)} of {len(both)} ({len(same - by_nr)} of {len(both) - len(by_nr)} answered by the parametric "
            f"prompt, {len(same & by_nr)} of {len(by_nr)} by the NR prompt after a <RET>)")


def report(gates: dict[str, dict], tunes: dict[str, dict], answers: dict[str, dict], tune_answers: dict[str, dict],
           ar: dict, labels: dict[str, str], max_share: float) -> list[str]:
    lines = [f"| gate | score | AUROC vs unknown | best at share <= {max_share:g} (this half, a bound) | "
             "tuning threshold (its share, accuracy there) | share | accuracy | − AR, paired |",
             "|---|---|---|---|---|---|---|---|"]
    for name, gate in gates.items():
        for score in SCORES:
            rows = scored(gate, answers[name], score)
            ids = sorted(set(rows) & set(ar))
            known = [i for i in ids if i in labels]
            auc = auroc_ci([rows[i]["score"] for i in known], [labels[i] == "unknown" for i in known])
            best = best_point(curve(rows), max_share)
            cells = [f"{auc[0]:.3f} [{auc[1]:.3f}, {auc[2]:.3f}]", f"{best[2]:.3f} (share {best[1]:.3f})"]
            if name in tunes:
                t, t_share, t_acc = best_point(curve(scored(tunes[name], tune_answers[name], score)), max_share)
                decided = decide(rows, t)
                acc = [decided[i][1] for i in ids]
                cells += [f"{t:.4f} ({t_share:.3f}, {t_acc:.3f})", _ci([float(decided[i][0]) for i in ids]), _ci(acc),
                          _diff(acc, [ar[i]["acc"] for i in ids])]
            else:
                cells += ["-"] * 4
            lines.append(f"| {name} | {score} | " + " | ".join(cells) + " |")
    return lines


def _split(spec: str, flag: str, n: int, what: str) -> tuple[str, list[str]]:
    name, _, rest = spec.partition("=")
    parts = rest.split(",") if rest else []
    if len(parts) != n:
        raise ValueError(f"{flag} {spec}: expected NAME={what}")
    for folder in parts[-3:]:
        if not (Path(folder) / "config.yaml").is_file():
            raise ValueError(f"{flag} {spec}: {folder} is not an evaluation folder (no config.yaml)")
    if n == 4 and not Path(parts[0]).is_dir():
        raise ValueError(f"{flag} {spec}: {parts[0]} is not a model folder")
    return name, parts


def answer_all(specs: dict[str, list[str]], tune_specs: dict[str, list[str]], cache: Path, batch_size: int):
    """Each gate's rows and re-answers on the evaluation half (and the tuning half where given), and how often the
    re-answers equal the recorded answers."""
    gates, tunes, answers, tune_answers, agree = {}, {}, {}, {}, []
    for name, (model, *folders) in specs.items():
        halves = [("evaluation", "eval", folders, gates, answers)]
        if name in tune_specs:
            halves.append(("tuning", "tune", tune_specs[name], tunes, tune_answers))
        for half, tag, half_folders, rows, re_answers in halves:
            rows[name] = gate_answers(*(per_question(Path(f)) for f in half_folders))
            memory = Path(half_folders[1])
            re_answers[name] = load_or_answer(cache / f"{name}-{tag}.jsonl", model, memory, batch_size)
            agree.append(f"{name} ({half} half) {agreement(re_answers[name], memory)}")
    return gates, tunes, answers, tune_answers, agree


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gate", action="append", required=True, help="NAME=MODEL,GATE,MEMORY,AR (repeat)")
    parser.add_argument("--tune", action="append", default=[], help="NAME=GATE,MEMORY,AR on the half that chooses")
    parser.add_argument("--ar", required=True, help="the reference AR's evaluation folder")
    parser.add_argument("--max_share", type=float, default=0.7)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--out", required=True, help="the table (Markdown); the re-answers go beside it")
    args = parser.parse_args(argv)
    try:
        specs = dict(_split(s, "--gate", 4, "MODEL,GATE,MEMORY,AR") for s in args.gate)
        tune_specs = dict(_split(s, "--tune", 3, "GATE,MEMORY,AR") for s in args.tune)
        for name in tune_specs:
            if name not in specs:
                raise ValueError(f"--tune {name}: no --gate {name} to apply it to")
        if not (Path(args.ar) / "config.yaml").is_file():
            raise ValueError(f"--ar {args.ar}: not an evaluation folder (no config.yaml)")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        gates, tunes, answers, tune_answers, agree = answer_all(specs, tune_specs, out.with_suffix(""),
                                                                args.batch_size)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ar = per_question(Path(args.ar))
    lines = report(gates, tunes, answers, tune_answers, ar, labels_of(Path(args.ar)), args.max_share)
    lines += ["", "Re-answers equal to the recorded answers from memory: " + ", ".join(agree)]
    text = "\n".join(lines)
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
