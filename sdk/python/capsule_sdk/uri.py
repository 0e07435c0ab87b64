"""Matching a URI against an RFC 6570 template of the shapes Capsule accepts: `{var}`,
`{+var}` and `{#var}`. The host has already routed the URI here; this recovers the values
exactly as the host and the Rust SDK do: each variable, from left to right, takes the
shortest non-empty value that lets the rest match, and is percent-decoded (bytes that are
not UTF-8 become U+FFFD)."""
from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import unquote

# RFC 6570 varname: varchars (letters, digits, `_`, %XX) with single dots between them.
_VARCHARS = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})+"
_EXPRESSION = re.compile(r"\{([+#]?)(" + _VARCHARS + r"(?:\." + _VARCHARS + r")*)\}")


@lru_cache(maxsize=64)
def _pattern(template: str) -> tuple[re.Pattern, tuple[str, ...]]:
    parts = []
    names = []
    last = 0
    for m in _EXPRESSION.finditer(template):
        parts.append(re.escape(template[last:m.start()]))
        operator, name = m.groups()
        names.append(name)
        # Lazy groups: the leftmost variable is tried shortest first.
        if operator == "":
            parts.append("([^/?#]+?)")
        elif operator == "+":
            parts.append("(.+?)")
        else:
            parts.append("#(.+?)")
        last = m.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts) + r"\Z", re.DOTALL), tuple(names)


def match(template: str, uri: str) -> dict[str, str] | None:
    """The template's variables in `uri`, percent-decoded; None if it does not match."""
    pattern, names = _pattern(template)
    m = pattern.match(uri)
    if m is None:
        return None
    return {name: unquote(value, errors="replace") for name, value in zip(names, m.groups())}
