"""Every document the code cites is in the repository, and says what it is cited for.

Comments cite docs/*.md by file and section ("docs/kafka-formats.md 5.2", "docs/design.md
"Durability switch""), guards by id (M0-M32) and invariants by id (I1-I23), all defined in
docs/reliability.md. A citation of a file, section or id that does not exist fails here, and so
does any citation of the documents that once lived beside the repository (the shared Kafka
reference, reliability model and design notes): a cloner does not have them.
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("storage", "csrc", "tests", "benchmarks", ".ci", "dev", "setup.py", "pyproject.toml",
           "ARCHITECTURE.md", "README.md", "docs")
TEXT_SUFFIXES = {".py", ".c", ".h", ".sh", ".md", ".json", ".toml", ".java", ".js", ""}

# What a clone does not have: the documents that lived in ../shared and ../kips.
OUTSIDE = re.compile(r"\.\./shared|/work/shared|\bshared/(?:docs|testdata)|\.\./kips|kafka-reference"
                     r"|reliability-model|(?<![\w/])design\.md|design notes"
                     r"|reliability model(?!.*reliability\.md)")   # named without the file it is in
DOC_CITATION = re.compile(r"docs/([\w.-]+\.md)(?:,? \"([^\"]+)\"|((?:[ ,;]+\d+(?:\.\d+)*(?:-\d+(?:\.\d+)*)?)+))?")
SECTION = re.compile(r"\d+(?:\.\d+)*")
GUARD_OR_INVARIANT = re.compile(r"\b([MI])(\d{1,2})\b")


def scanned_files(root: Path) -> list[Path]:
    out = []
    for name in SCANNED:
        path = root / name
        paths = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for p in paths:
            relative = p.relative_to(root).as_posix()
            if p.suffix not in TEXT_SUFFIXES or "__pycache__" in relative:
                continue
            if relative.startswith("tests/data/") and p.suffix != ".md":
                continue            # real Kafka files, binary; only their provenance notes are read
            out.append(p)
    return out


def headings(doc: Path) -> list[str]:
    prose = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    return re.findall(r"^#{1,6} (.*)$", prose, re.M)


def defined_ids(root: Path) -> set[str]:
    """The ids docs/reliability.md defines: invariants as '**In ...', guards as table rows."""
    text = (root / "docs" / "reliability.md").read_text()
    return set(re.findall(r"^- \*\*(I\d+) ", text, re.M)) | set(re.findall(r"^\| (M\d+) \|", text, re.M))


def problems(root: Path) -> list[str]:
    ids = defined_ids(root)
    sections: dict[str, tuple[set[str], set[str]]] = {}
    for doc in (root / "docs").glob("*.md"):
        titles = headings(doc)
        numbers = {m.group(0) for t in titles if (m := re.match(r"\d+(?:\.\d+)*", t))}
        sections[doc.name] = (numbers, {t.strip().lower() for t in titles})
    out = []
    for path in scanned_files(root):
        where = path.relative_to(root).as_posix()
        if where == "tests/test_docs.py":
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            at = f"{where}:{number}"
            if found := OUTSIDE.search(line):
                out.append(f"{at}: cites {found.group(0)!r}, which is not in the repository")
            for cited in DOC_CITATION.finditer(line):
                name, title, numbers = cited.groups()
                if name not in sections:
                    out.append(f"{at}: docs/{name} does not exist")
                    continue
                if title and title.strip().lower() not in sections[name][1]:
                    out.append(f"{at}: docs/{name} has no section {title!r}")
                for section in SECTION.findall(numbers or ""):
                    if section not in sections[name][0]:
                        out.append(f"{at}: docs/{name} has no section {section}")
            if path.suffix in {".py", ".c", ".h"} or where.startswith("docs/") or where == "ARCHITECTURE.md":
                for kind, n in GUARD_OR_INVARIANT.findall(line):
                    if f"{kind}{int(n)}" not in ids:
                        out.append(f"{at}: {kind}{n} is not defined in docs/reliability.md")
    return out


def test_every_citation_resolves_in_the_repository():
    assert problems(ROOT) == []


def test_a_dangling_citation_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "reliability.md").write_text(
        "# R\n\n## 2. Invariants\n\n- **I1 Log matching.** ...\n\n| id |\n|---|\n| M1 | guard |\n")
    (tmp_path / "docs" / "kafka-formats.md").write_text("# K\n\n## 1. Batches\n\n### 1.1 Header\n\n## Pitfalls\n")
    (tmp_path / "storage").mkdir()
    (tmp_path / "storage" / "fine.py").write_text(
        '# docs/kafka-formats.md 1.1, 1 and docs/reliability.md 2 (I1, M1); docs/kafka-formats.md "Pitfalls"\n')
    (tmp_path / "storage" / "bad.py").write_text(
        "# kafka-reference 1.1 and ../shared/docs/design.md\n"
        "# docs/kafka-formats.md 1.2-1.1 and docs/gone.md 3, as the reliability model says\n"
        '# I2 and M33 guard; docs/kafka-formats.md "Nowhere"\n')
    assert problems(tmp_path) == [
        "storage/bad.py:1: cites 'kafka-reference', which is not in the repository",
        "storage/bad.py:1: docs/design.md does not exist",
        "storage/bad.py:2: cites 'reliability model', which is not in the repository",
        "storage/bad.py:2: docs/kafka-formats.md has no section 1.2",
        "storage/bad.py:2: docs/gone.md does not exist",
        "storage/bad.py:3: docs/kafka-formats.md has no section 'Nowhere'",
        "storage/bad.py:3: I2 is not defined in docs/reliability.md",
        "storage/bad.py:3: M33 is not defined in docs/reliability.md",
    ]


def test_every_guard_of_the_catalogue_has_its_row():
    """The guard table of docs/reliability.md and storage.core.guards.CATALOGUE name the same
    guards (M14 has a row that says why it is not one)."""
    from storage.core import guards

    rows = {i for i in defined_ids(ROOT) if i.startswith("M")}
    assert rows - set(guards.CATALOGUE) == {"M14"}
    assert set(guards.CATALOGUE) <= rows


def missing_paths(root: Path) -> list[str]:
    """Repository paths the README, ARCHITECTURE.md and docs/ name in backticks that do not exist
    (docs/kafka-formats.md is left out: its paths are inside Kafka's repository)."""
    pages = [root / "README.md", root / "ARCHITECTURE.md", *sorted((root / "docs").glob("*.md"))]
    out = []
    for page in pages:
        if page.name == "kafka-formats.md" or not page.exists():
            continue
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for path in re.findall(r"`((?:storage|csrc|tests|benchmarks|\.ci)/[\w./-]*)`", line):
                if not (root / path).exists():
                    out.append(f"{page.relative_to(root).as_posix()}:{number}: {path}")
    return out


def test_every_path_the_guides_name_exists(tmp_path):
    """A module or test that moves must take the guides' mention of it along."""
    assert missing_paths(ROOT) == []
    (tmp_path / "docs").mkdir()
    (tmp_path / "storage").mkdir()
    (tmp_path / "storage" / "here.py").write_text("")
    (tmp_path / "docs" / "guide.md").write_text("`storage/here.py` and `storage/log.py`\n")
    assert missing_paths(tmp_path) == ["docs/guide.md:1: storage/log.py"]


_CODE_PATH = re.compile(r"(?<![\w/.])((?:storage|csrc|tests|benchmarks)/[\w/-]+\.(?:py|c|h|java|js|json))\b")


def missing_code_paths(root: Path) -> list[str]:
    """Repository files the code, tests and CI scripts name (in comments, docstrings, messages)
    that do not exist: a comment that says where something lives must move with it."""
    out = []
    for path in scanned_files(root):
        if path.suffix not in (".py", ".c", ".h", "", ".sh", ".toml") or path.name in ("test_docs.py", "test_tidy.py"):
            continue                # (these two hold made-up paths as their examples)
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for named in _CODE_PATH.findall(line):
                if "/internals/" not in named and not named.startswith("storage/src/") and not (root / named).exists():
                    out.append(f"{path.relative_to(root).as_posix()}:{number}: {named}")
    return out


def test_every_path_the_code_names_exists(tmp_path):
    assert missing_code_paths(ROOT) == []
    (tmp_path / "storage" / "log").mkdir(parents=True)
    (tmp_path / "storage" / "log" / "segment.py").write_text('"""See storage/log/segment.py and storage/io.py."""\n')
    assert missing_code_paths(tmp_path) == ["storage/log/segment.py:1: storage/io.py"]
