"""The reproduce command end to end on CPU at toy size: release-shaped files from a local HTTP server (the download
tests' server and files), the embedded SmolLM2-135M, two questions, eight new tokens; from an empty folder to the
report, then a rerun that fetches and runs nothing again."""

from __future__ import annotations

import gzip
import json

import pytest
from test_download import UNPINNED, RangeHandler, _release_files, _serve, server  # noqa: F401 (server: a fixture)
from test_dragin_as_authors import FAKE_DATA_PY

from inference.commands import reproduce as rp

HOTPOT = [{"_id": f"h{i}", "question": q, "answer": a, "type": "bridge", "level": "hard",
           "supporting_facts": [[a, 0]], "context": [[a, [f"{a} is the answer to {q}"]], ["Cusco", ["Cusco is old."]]]}
          for i, (q, a) in enumerate([("Which city was founded in 1535?", "Lima"), ("Who wrote Hamlet?",
                                                                                     "Shakespeare")])]
PASSAGES = ("id\ttext\ttitle\n1\tLima was founded in 1535 by Pizarro.\tLima\n"
            "2\tHamlet is a play by William Shakespeare.\tHamlet\n3\tCusco is an old city in Peru.\tCusco\n")
TOY = ["--model", "smollm2-135m", "--limit", "2", "--set", "max_new_tokens=8", "--set", "show_progress=false"]


@pytest.fixture()
def hosts(server, monkeypatch):  # noqa: F811 (the download tests' server fixture)
    root, base = server
    _release_files(root)
    (root / "hotpot_dev_distractor_v1.json").write_text(json.dumps(HOTPOT))
    (root / "psgs_w100.tsv.gz").write_bytes(gzip.compress(PASSAGES.encode()))
    (root / "data.py").write_text(FAKE_DATA_PY)  # shaped like the DRAGIN authors' src/data.py
    for name in ("hotpotqa", "dpr-wiki", "dragin-code"):  # these small files are checked as recorded, not pinned
        _serve(monkeypatch, base, name, **UNPINNED[name])
    return root


@pytest.mark.slow
def test_from_an_empty_folder_to_the_tables_and_a_rerun_that_does_nothing(hosts, tmp_path, capsys):
    out = tmp_path / "repro"
    # DRAGIN on HotpotQA; the fake data.py has two exemplars where the authors' row asks for eight
    dragin = ["dragin-table2", "--datasets", "hotpotqa", "--methods", "dragin", "--output_dir", str(out), *TOY,
              "--set", "num_demos=2"]
    rp.main(dragin)
    folder = out / "dragin-table2" / "smollm2-135m"
    report = (folder / "report.md").read_text()
    assert report in capsys.readouterr().out  # printed too
    row = next(line for line in report.splitlines() if line.startswith("| hotpotqa | dragin | 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    metrics = json.loads((folder / "hotpotqa" / "method=dragin" / "metrics.json").read_text())
    assert cells[3].startswith(f"{metrics['em']:.3f} [") and cells[4] == "0.232"  # ours [interval] | paper
    assert cells[5] == f"{metrics['em'] - 0.232:+.3f}" and cells[10] == "3.00"  # difference; Table 3's retrievals
    assert "- model: smollm2-135m (paper: meta-llama/Llama-2-7b-chat-hf" in report
    assert "- questions: the first 2 of each evaluation" in report and "- max_new_tokens: 8 (set with --set)" in report
    assert "[hotpotqa/method=dragin](hotpotqa/method=dragin) (finished)" in report

    RangeHandler.requests = []
    rp.main(dragin)
    logs = capsys.readouterr().out
    assert RangeHandler.requests == []  # nothing fetched again
    assert "[1/4] download: complete, skipped" in logs and "[3/4] hotpotqa/dragin: complete, skipped" in logs

    # Iter-RetGen's rows over BM25 (the paper: Contriever), from the same data folder: the download is skipped
    rp.main(["iter-retgen-hotpotqa", "--index_kind", "bm25", "--output_dir", str(out), *TOY])
    logs = capsys.readouterr().out
    assert "[1/5] download: complete, skipped" in logs
    report = (out / "iter-retgen-hotpotqa" / "smollm2-135m" / "report.md").read_text()
    assert [line.split("|")[1].strip() for line in report.splitlines() if line.startswith("| T=")] == \
        ["T=1", "T=2", "T=3"]
    assert "- index kind: bm25 (paper: contriever)" in report and "| — | — |" in report  # no paper cell entered
