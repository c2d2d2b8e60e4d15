"""The troubleshooting page's headings are the words the code prints: each must still be in a
string of the source (a Python literal, an f-string's fixed parts, a dashboard template), so the
page cannot go on quoting a message that was reworded or removed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "troubleshooting.md"
HOLE = "\x00"
"""Where an f-string's value goes: no heading may span it."""


def said() -> list[str]:
    """Every string the source can print, its whitespace collapsed."""
    texts: list[str] = []
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.JoinedStr):
                texts.append(
                    "".join(
                        part.value
                        if isinstance(part, ast.Constant) and isinstance(part.value, str)
                        else HOLE
                        for part in node.values
                    )
                )
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.append(node.value)
    texts += [page.read_text() for page in (ROOT / "src").rglob("*.html")]
    return [" ".join(text.split()) for text in texts]


def headings() -> list[str]:
    return re.findall(r"^### `(.+)`$", PAGE.read_text(), flags=re.MULTILINE)


def test_every_message_on_the_page_is_one_the_code_says() -> None:
    found = headings()
    assert len(found) >= 20
    texts = said()
    missing = [words for words in found if not any(words in text for text in texts)]
    assert not missing, f"the code no longer says these (reword the page): {missing}"


def test_a_reworded_message_is_caught() -> None:
    texts = said()
    assert any("the server could not be reached at start" in text for text in texts)
    assert not any("the server could not be reached at the start" in text for text in texts)
