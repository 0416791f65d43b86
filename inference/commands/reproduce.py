"""From an empty folder to a paper's table in one command: download, corpus, index, every run, the report.

    python -m inference.commands.reproduce --list                                  # the tables and their steps
    python -m inference.commands.reproduce dragin-table2 --dry_run                 # each step's command, one a line
    python -m inference.commands.reproduce dragin-table2 --datasets hotpotqa --model meta-llama/Llama-2-7b-chat-hf
    python -m inference.commands.reproduce adapt-llm-popqa --output_dir runs/reproduce
    python -m inference.commands.reproduce iter-retgen-hotpotqa --index_kind bm25 --limit 50   # a quick look

Every step is one of the project's own commands (``--dry_run`` prints them, so each can be run alone) and runs
here in this process, in order. A rerun skips every step whose output is complete (a finished download, corpus or
index; a run whose folder has its metrics and was made by the same command) and an evaluation that was cut off
resumes its own folder. The report (``<output_dir>/<table>/<model>/report.md``, also printed) shows each cell as
ours [95% interval] | paper | difference, says which settings differ from the paper's, and links the run folders
(docs/reproduce.md).
"""

from __future__ import annotations

import gc
import importlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from adaptive_rag.plumbing.atomic_files import write_text_atomic
from adaptive_rag.plumbing.cli import one_line, run_cli
from adaptive_rag.plumbing.errors import ConfigError, DataError
from inference.commands.eval_checks import check_model_name
from inference.commands.reproduce_plan import Options, Step, options_parser, read_manifest
from inference.commands.reproduce_report import write_report
from inference.commands.reproduce_tables import TABLES, options_from

STAMP = "reproduce_step.json"  # in a run's folder once its step returned: the command that made it


def parser():
    p = options_parser("python -m inference.commands.reproduce",
                       "Reproduce a paper's table: data, corpus, index, every run and the report, resumable.")
    p.add_argument("--dry_run", "--dry-run", action="store_true", help="print each step's command and exit")
    p.add_argument("--list", action="store_true", help="list the tables and their steps, and exit")
    p.add_argument("--report_only", "--report-only", action="store_true",
                   help="write the table's report from the runs there now (its last step), run nothing else")
    p.add_argument("--mirror", action="append", default=[], metavar="FOLDER_OR_URL",
                   help="a place holding the release files by name, tried first by the download step (repeatable)")
    return p


def describe_tables() -> str:
    """Each table, what it runs and its index kinds (the paper's first)."""
    lines = []
    for table in TABLES.values():
        steps = table.steps(Options(table.name, output_dir="OUT"))
        kinds = ", ".join(f"{k} (the paper's)" if k == table.paper_index else k for k in table.index_kinds)
        lines += [f"{table.name}: {table.title}", f"  paper: {table.paper_model}; {table.paper_questions}",
                  f"  index kinds: {kinds}", f"  {len(steps)} steps: " + ", ".join(s.name for s in steps), ""]
    return "\n".join(lines).rstrip()


def is_complete(opts: Options, step: Step) -> bool:
    """A step whose output is complete: a download whose sources the manifest holds with every file; a corpus or
    index that exists (both are published whole); a run with its outputs, made by this very command."""
    if step.kind == "report":
        return False  # cheap, and it must show the runs as they are now
    if step.kind == "download":
        manifest = read_manifest(opts.out / "data")
        return all(name in manifest and all((opts.out / "data" / rel).is_file()
                                            for rel in manifest[name].get("files", {})) for name in step.sources)
    if not all(Path(p).is_file() for p in step.outputs):
        return False
    if step.kind != "run":
        return True
    try:
        return json.loads((Path(step.folder) / STAMP).read_text(encoding="utf-8")).get("command") == step.command
    except (OSError, ValueError):
        return False


def run_step(step: Step) -> None:
    """The step's command, in this process (its module's ``main``). A user's mistake is one line naming the step;
    a command that exits on one itself (argparse commands print their line first) ends this one with its status."""
    module = importlib.import_module(step.module)
    try:
        code = module.main(list(step.args))
    except SystemExit as exit_:
        code = exit_.code
    except (ConfigError, DataError) as err:
        kind = ConfigError if isinstance(err, ConfigError) else DataError  # subclasses take other arguments
        raise kind(f"step {step.name}: {one_line(str(err))}") from None
    if code not in (None, 0):
        print(f"reproduce: step {step.name} stopped (exit status {code}); rerun the same command once the line above "
              "is dealt with", file=sys.stderr)
        raise SystemExit(code)


def release_memory() -> None:
    """What a finished step's model held (each run loads its own), before the next one loads."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def reproduce(opts: Options, *, log=print) -> list[str]:
    """Run every step of the table not complete yet; returns the names of the steps that ran."""
    table = TABLES[opts.table]
    if opts.model:  # a mistyped model ends here, before any download
        check_model_name(opts.model)
    ran = []
    total = len(table.steps(opts))
    for i in range(total):
        step = table.steps(opts)[i]  # planned again: paths come from the manifest once the download wrote it
        if is_complete(opts, step):
            log(f"[{i + 1}/{total}] {step.name}: complete, skipped")
            continue
        log(f"[{i + 1}/{total}] {step.name}: {step.command}")
        start = time.time()
        try:
            run_step(step)
        except KeyboardInterrupt as err:  # the step's own word on what it kept (an evaluation's saved questions)
            kept = f" ({one_line(str(err))})" if str(err) else ""
            raise KeyboardInterrupt(f"during step {step.name}{kept}; rerun the same command: complete steps are "
                                    "skipped and this one resumes") from None
        finally:
            release_memory()
        if step.kind == "run":
            write_text_atomic(Path(step.folder) / STAMP, json.dumps({"command": step.command,
                                                                  "seconds": round(time.time() - start, 1)}) + "\n")
        ran.append(step.name)
    return ran


def main(argv: Sequence[str] | None = None) -> None:
    p = parser()
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.list:
        print(describe_tables())
        return
    if not args.table:
        raise ConfigError("name a table (python -m inference.commands.reproduce --list shows them)")
    cuda = False if args.no_cuda else _has_cuda()
    opts = options_from(args, cuda=cuda)
    if args.dry_run:
        print("\n".join(step.command for step in TABLES[opts.table].steps(opts)))
    elif args.report_only:
        write_report(opts)
    else:
        reproduce(opts)


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return run_cli(main, resume_hint="complete steps are kept; rerun the same command to resume")


if __name__ == "__main__":
    sys.exit(cli())
