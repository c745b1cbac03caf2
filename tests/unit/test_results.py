"""docs/results.md and the README's table are rendered from the stored runs
(tools/results.py): a hand-edited figure fails the check."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.unit.tooling import load_tool

ROOT = Path(__file__).resolve().parents[2]


def _results():
    return load_tool("results")


def test_the_results_page_and_the_readme_table_match_the_stored_runs():
    assert _results().main(["--check"]) == 0, "run `python tools/results.py`"


def test_a_hand_edited_figure_fails_the_check(tmp_path, monkeypatch, capsys):
    r = _results()
    doc, readme = tmp_path / "results.md", tmp_path / "README.md"
    shutil.copy(r.DOC, doc)
    shutil.copy(r.README, readme)
    monkeypatch.setattr(r, "DOC", doc)
    monkeypatch.setattr(r, "README", readme)
    assert r.main(["--check"]) == 0
    text = readme.read_text()
    begin = text.index(r.BEGIN)
    row = text.index("| ", text.index("|---", begin))        # the first row of the table
    cell = text.index(" | ", row + 2) + 3                    # its "measured" cell
    readme.write_text(text[:cell] + "9" + text[cell:])
    assert r.main(["--check"]) == 1
    assert "README.md" in capsys.readouterr().err
    assert r.main([]) == 0 and r.main(["--check"]) == 0      # rendering puts it back


def test_runs_group_by_bench_and_the_latest_commit_gives_the_figures(tmp_path):
    r = _results()
    for date, commit, pps in (("2026-12-01", "aaaaaaa", 900_000), ("2026-12-02", "bbbbbbb", 1_100_000),
                              ("2026-12-02", "bbbbbbb", 1_300_000)):
        stem = f"engine_bench-{date}-{commit}"
        n = len(list(tmp_path.glob(stem + "*.json")))
        run = {"bench": "engine_bench", "commit": commit, "date": f"{date}T0{n}:00:00Z",
               "machine": {"cores": 2, "kernel": "6.18"}, "command": "python bench/engine_bench.py --json",
               "packets_per_sec_per_core": pps, "qp_state_bytes": 60000, "qps_created": 1000,
               "target_packets_per_sec_per_core": 1_000_000, "target_qp_state_bytes": 65536}
        (tmp_path / f"{stem}{'-' + str(n) if n else ''}.json").write_text(json.dumps(run))
    runs = r.load(tmp_path)["engine_bench"]
    assert [x["commit"] for x in runs] == ["aaaaaaa", "bbbbbbb", "bbbbbbb"]
    # the tagged file is a variant; the untagged runs of the latest commit give the figure
    main = [x for x in runs if not x["_tag"]]
    lines, head = r.engine([x for x in main if x["commit"] == main[-1]["commit"]])
    assert "1,100,000" in head[0][1]
    page, table = r.render({"engine_bench": runs})
    assert "## The engine" in page and "No stored run yet" in page   # every other bench says so
    assert "1,100,000" in table and "900,000" not in table


def test_a_stored_file_that_is_not_a_run_gets_a_clear_error(tmp_path):
    r = _results()
    for name, text in (("engine_bench-2026-12-01-aaaaaaa.json", "{not json"),
                       ("engine_bench-2026-12-02-bbbbbbb.json", "[1, 2]")):
        for f in tmp_path.glob("*.json"):
            f.unlink()
        (tmp_path / name).write_text(text)
        try:
            r.load(tmp_path)
        except SystemExit as e:
            assert name in str(e) and "not a stored run" in str(e)
        else:
            raise AssertionError(f"{name}: no error")
