"""Template source rules that a page would otherwise show as text."""

from pathlib import Path

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def test_no_template_comment_spans_lines():
    """Django's `{# … #}` ends at its line: one that goes on is printed on the page as it stands."""
    spanning = [
        f"{path.relative_to(TEMPLATES)}:{number}"
        for path in TEMPLATES.rglob("*.*")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "{#" in line and "#}" not in line.split("{#", 1)[1]
    ]
    assert not spanning, spanning
