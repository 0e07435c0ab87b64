"""Capsule's Python example plugin: every kind of thing a plugin can provide, written with
the Python SDK (`sdk/python`). Build: `capsule-py build app.py -o python.wasm`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from capsule_sdk import Context, NotFound, assistant, complete, prompt, resource, tool, user


@dataclass
class Stats:
    words: int
    lines: int
    longest: str


@tool(read_only=True)
def stats(text: Annotated[str, "The text to measure"]) -> Stats:
    """Count the words and lines of a text and find its longest word."""
    words = text.split()
    return Stats(len(words), len(text.splitlines()), max(words, key=len, default=""))


@tool
def convert(value: float, unit: Literal["km", "mi"] = "km") -> float:
    """Convert a distance to the other unit (km to miles or miles to km)."""
    return round(value / 1.609344 if unit == "km" else value * 1.609344, 6)


@tool
def countdown(n: int, ctx: Context) -> str:
    """Count down from n, logging and reporting progress at each step."""
    for i in range(n):
        ctx.info(f"{n - i} to go")
        ctx.progress(i + 1, n, f"step {i + 1}")
    return "lift-off"


@dataclass
class Confirm:
    sure: bool


@dataclass
class Backups:
    backups: bool


@tool(destructive=True)
def shred(name: str, ctx: Context) -> str:
    """Pretend to shred a document, after asking the user to confirm (and about its backups)."""
    answer = ctx.elicit(f"Really shred {name}?", Confirm)
    if not answer.accepted or not answer.content.sure:
        return f"kept {name}"
    # A second question: the first one's answer is still known when this one is answered.
    backups = ctx.elicit(f"Shred the backups of {name} too?", Backups)
    if backups.accepted and backups.content.backups:
        return f"shredded {name} and its backups"
    return f"shredded {name}"


@tool(read_only=True)
def read_file(path: str) -> str:
    """Read a text file inside a directory the host granted (nothing else exists)."""
    with open(path, encoding="utf-8") as f:
        return f.read()


@tool
def fail(message: str) -> str:
    """Raise an exception with the given message (shows how errors reach the model)."""
    raise RuntimeError(message)


NOTES = {"welcome": "Capsule runs this Python plugin in a fresh sandbox for every call.",
         "limits": "Each call has a CPU deadline and a memory cap."}


@resource("notes://index", mime_type="text/plain")
def index() -> str:
    """The names of all notes."""
    return "\n".join(sorted(NOTES))


@resource("notes://{name}", mime_type="text/plain")
def note(name: str) -> str:
    """One note, by name."""
    if name not in NOTES:
        raise NotFound(f"no note {name}")
    return NOTES[name]


@complete(template="notes://{name}", argument="name")
def note_names(value: str) -> list[str]:
    return [n for n in sorted(NOTES) if n.startswith(value)]


@prompt
def review(code: str, language: str = "python") -> list:
    """Ask for a careful code review."""
    return [user(f"Please review this {language} code:\n\n{code}"),
            assistant("I will look for bugs first, then style.")]


@complete(prompt="review", argument="language")
def languages(value: str) -> list[str]:
    return [n for n in ["c", "javascript", "python", "rust", "typescript"] if n.startswith(value)]
