"""Content a tool or prompt can return besides text and structured data."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Image:
    """An image: its bytes and media type (`image/png`, …)."""

    data: bytes
    mime_type: str


@dataclass
class Audio:
    """An audio clip: its bytes and media type (`audio/wav`, …)."""

    data: bytes
    mime_type: str


@dataclass
class Link:
    """A link to a resource the client may read later."""

    uri: str
    name: str
    description: str | None = None
    mime_type: str | None = None


@dataclass
class ResourceContents:
    """A resource embedded in a result, or a read's body with its own URI and media type."""

    uri: str
    body: Any
    mime_type: str | None = None
