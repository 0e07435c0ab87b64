"""Matching a URI against an RFC 6570 template of the shapes Capsule accepts: `{var}`,
`{+var}` and `{#var}`. The host has already routed the URI here; this recovers the values."""
from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import unquote

_EXPRESSION = re.compile(r"\{([+#]?)([A-Za-z0-9_]+)\}")


@lru_cache(maxsize=64)
def _pattern(template: str) -> re.Pattern:
    parts = []
    last = 0
    for m in _EXPRESSION.finditer(template):
        parts.append(re.escape(template[last:m.start()]))
        operator, name = m.groups()
        if operator == "":
            parts.append(f"(?P<{name}>[^/?#]*)")
        elif operator == "+":
            parts.append(f"(?P<{name}>.*?)")
        else:
            parts.append(f"(?:#(?P<{name}>.*?))?")
        last = m.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts) + r"\Z", re.DOTALL)


def match(template: str, uri: str) -> dict[str, str] | None:
    """The template's variables in `uri`, percent-decoded; None if it does not match."""
    m = _pattern(template).match(uri)
    if m is None:
        return None
    return {k: unquote(v) for k, v in m.groupdict(default="").items()}
