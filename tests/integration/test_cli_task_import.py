"""``corral task import FILE.jsonl|csv``: the good lines go in through add_tasks in
batches, the summary names each refused line with the rule's message, a file that is
not tasks is exit 2 naming it, and a refused batch says which lines went in."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import corral
from corral.cli import cli
from corral.cli._common import run_main
from corral.types import Client
from tests.support.served import TOKEN, corral_serve

Run = Callable[..., tuple[int, str, str]]
"""``corral --url URL task import ARGS...`` in this process: (code, out, err)."""


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    return f"sqlite:///{tmp_path / 'c.db'}"


@pytest.fixture
def c(url: str) -> Iterator[Client]:
    client = corral.connect(url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def corral_import(url: str, capsys: pytest.CaptureFixture[str]) -> Run:
    def run(*args: str) -> tuple[int, str, str]:
        code = run_main(cli, ["--url", url, "task", "import", *args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


JSONL = "\n".join(
    [
        '{"title": "Implement login", "priority": "high"}',
        '{"title": "Fix it", "priority": "urgent"}',
        "not json",
        "",
        "[1, 2]",
        '{"title": "Plan the release", "role": "wizard"}',
        '{"title": "Review", "colour": "red"}',
        '{"title": "Write the guide", "role": "architect", "max_attempts": 2}',
        '{"description": "no title"}',
        '{"title": "   "}',
    ]
)


def test_a_jsonl_files_good_lines_go_in_and_each_refused_line_is_named(
    tmp_path: Path, c: Client, corral_import: Run
) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(JSONL + "\n")
    code, out, err = corral_import(str(path), "--batch-size", "1")
    assert (code, err) == (1, "")  # some lines refused, the others in
    tasks = sorted(c.list_tasks(), key=lambda t: t.id)
    assert [(t.title, t.priority) for t in tasks] == [
        ("Implement login", "high"),
        ("Write the guide", "medium"),
    ]
    guide = tasks[1]
    assert (guide.role, guide.max_attempts) == ("architect", 2)
    lines = out.splitlines()
    assert lines[:2] == ["line 1: 1 task added", "line 8: 1 task added"]  # a line per batch
    assert lines[2:] == [
        f"imported 2 tasks from {path}: lines 1, 8, ids {tasks[0].id}-{tasks[1].id}",
        "refused 7 lines:",
        "  line 2: priority: priority must be one of high, medium, low; got 'urgent'",
        "  line 3: not JSON: Expecting value: line 1 column 1 (char 0)",
        "  line 5: not a JSON object",
        "  line 6: role: role must be one of bootstrap_manager, runner, architect, developer;"
        " got 'wizard'",
        "  line 7: unknown keys ['colour'] (a task has title, description, priority, role,"
        " max_attempts, progress_timeout, timeout, not_before, depends_on, retry_backoff)",
        "  line 9: title: a task needs a title",
        f"  line 10: title: {_title_message(c)}",
    ]


def _title_message(c: Client) -> str:
    """The title rule's own message for a blank title (what add_task answers)."""
    with pytest.raises(corral.InvalidInputError) as caught:
        c.add_task("   ")
    return caught.value.message


def test_a_csv_files_good_rows_go_in_in_batches_and_each_refused_row_is_named(
    tmp_path: Path, c: Client, corral_import: Run
) -> None:
    path = tmp_path / "tasks.csv"
    path.write_text(
        "title,priority,role,max_attempts\n"
        "Implement search,high,,\n"
        "Fix it,urgent,,\n"
        '"Test it, twice",low,developer,3\n'
        "\n"
        "Document it,low,,0\n"
        "Too,many,cells,1,2\n"
        "Ship it,,,\n"
    )
    code, out, _ = corral_import(str(path), "--batch-size", "2")
    assert code == 1
    tasks = sorted(c.list_tasks(), key=lambda t: t.id)
    assert [(t.title, t.priority, t.role, t.max_attempts) for t in tasks] == [
        ("Implement search", "high", None, 3),
        ("Test it, twice", "low", "developer", 3),
        ("Ship it", "medium", None, 3),
    ]
    assert out.splitlines() == [
        "lines 2, 4: 2 tasks added",
        "line 8: 1 task added",
        f"imported 3 tasks from {path}: lines 2, 4, 8, ids {tasks[0].id}-{tasks[2].id}",
        "refused 3 lines:",
        "  line 3: priority: priority must be one of high, medium, low; got 'urgent'",
        "  line 6: max_attempts: max_attempts must be a positive integer; got 0",
        "  line 7: 5 cells for 4 columns",
    ]


def test_every_line_in_is_exit_0_and_json_says_each_line(
    tmp_path: Path, c: Client, corral_import: Run
) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"title": f"Task {i}"}) + "\n" for i in range(5)))
    code, out, _ = corral_import(str(path), "--json")
    assert code == 0
    got = json.loads(out)
    ids = sorted(t.id for t in c.list_tasks())
    assert got["added"] == [{"line": n + 1, "task_id": i} for n, i in enumerate(ids)]
    assert (got["refused"], got["not_sent"], got["error"]) == ([], [], None)


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("tasks.txt", "title\nx\n", "not a .jsonl or .csv file"),
        ("missing.jsonl", None, "cannot read it: No such file or directory"),
        ("binary.jsonl", b"\xff\xfe{}", "not UTF-8 text (invalid start byte at byte 0)"),
        ("empty.jsonl", "\n\n", "no tasks in it"),
        ("empty.csv", "", "empty (a CSV file's first row names its columns)"),
        (
            "columns.csv",
            "name,priority\nx,high\n",
            "unknown columns ['name']: the header names the columns, of title, description,"
            " priority, role, max_attempts, progress_timeout, timeout, not_before, depends_on,"
            " retry_backoff",
        ),
        (
            "notitle.csv",
            "priority\nhigh\n",
            "no title column: the header names the columns, of title, description, priority,"
            " role, max_attempts, progress_timeout, timeout, not_before, depends_on,"
            " retry_backoff",
        ),
    ],
)
def test_a_bad_file_is_exit_2_naming_it_and_nothing_goes_in(
    tmp_path: Path,
    c: Client,
    corral_import: Run,
    name: str,
    content: str | bytes | None,
    why: str,
) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    code, out, err = corral_import(str(path))
    assert (code, out) == (2, "")
    assert err == f"error: file: {path}: {why}\n"
    assert c.list_tasks() == []


def test_a_refused_batch_says_which_lines_went_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Against corral serve with a viewer's token the cluster refuses the first batch:
    exit 1 and the summary says that no line went in, naming them."""
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"title": f"Task {i}"}) + "\n" for i in range(3)))
    with corral_serve(tmp_path) as base, corral.connect(base, token=TOKEN) as c:
        viewer = c.create_token("viewer-1", "viewer").token
        assert viewer is not None
        monkeypatch.setenv("CORRAL_TOKEN", viewer)
        code = run_main(cli, ["--url", base, "task", "import", str(path)])
        out = capsys.readouterr().out
        assert code == 1
        first, stopped = out.splitlines()
        assert first == f"imported 0 tasks from {path}"
        start = "stopped: the cluster refused the batch from line 1: the token 'viewer-1'"
        assert stopped.startswith(start + " has the viewer role")
        assert stopped.endswith("; lines 1-3 did not go in")
        assert c.list_tasks() == []
