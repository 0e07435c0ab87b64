"""{{name}}: a Capsule plugin."""
from dataclasses import dataclass

from capsule_sdk import tool


@dataclass
class Stats:
    words: int
    lines: int


@tool(read_only=True)
def stats(text: str) -> Stats:
    """Count the words and lines of a text."""
    return Stats(len(text.split()), len(text.splitlines()))
