"""Markdown table of evaluation folders' metrics.json: ``python bench/experiments/table.py DIR...``;
``--best f1 DIR...`` prints only the name of the folder with the highest value of that metric."""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = ("n", "em", "f1", "acc", "retrieval_calls", "llm_forward_passes", "generated_tokens", "seconds_per_question")


def load(folders: list[str]) -> list[tuple[str, dict]]:
    out = []
    for folder in folders:
        path = Path(folder) / "metrics.json"
        if path.is_file():
            out.append((Path(folder).name, json.loads(path.read_text())))
    return out


def main(args: list[str]) -> None:
    if args and args[0] == "--best":
        metric, rows = args[1], load(args[2:])
        print(max(rows, key=lambda r: r[1].get(metric, 0.0))[0])
        return
    print("| run | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---|" * len(COLUMNS))
    for name, m in load(args):
        cells = [f"{m.get(c, 0):.3f}" if isinstance(m.get(c), float) else str(m.get(c, "")) for c in COLUMNS]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
