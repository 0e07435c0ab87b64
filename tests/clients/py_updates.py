"""Resource subscriptions through the official Python SDK client: a client subscribed to a
file the `files` plugin serves hears `notifications/resources/updated` when a tool writes it,
over a legacy session (`resources/subscribe`) or a 2026-07-28 `subscriptions/listen` stream,
and stops hearing once it unsubscribes.

Prints one line per check and ends with `N passed, M failed`; exit 1 if any failed.
"""
from __future__ import annotations

import argparse
import asyncio
import pathlib
import sys
import warnings

import mcp

from checks import check, report


def text(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.contents)


async def eventually(predicate, seconds: float = 5.0) -> bool:
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


async def legacy(opts, root: pathlib.Path) -> None:
    updates: list[str] = []

    async def on_message(message) -> None:
        message = getattr(message, "root", message)
        if getattr(message, "method", None) == "notifications/resources/updated":
            updates.append(str(message.params.uri))

    client = mcp.Client(opts.url, mode="legacy", message_handler=on_message)
    async with client:
        label = f"[legacy {client.protocol_version}]"
        note = root / "legacy-note.txt"
        note.write_text("v1")
        uri = note.as_uri()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resources/subscribe is deprecated by 2026-07-28
            await client.subscribe_resource(uri)
        result = await client.call_tool("write_file", {"path": str(note), "content": "v2"})
        check(f"{label} write_file", not result.is_error)
        check(f"{label} the subscriber hears the write", await eventually(lambda: uri in updates), str(updates))
        read = await client.read_resource(uri)
        check(f"{label} the resource reads the new content", text(read) == "v2", text(read))

        # A subscription to the directory covers the files beneath it.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.subscribe_resource(root.as_uri())
            await client.unsubscribe_resource(uri)
        other = root / "sub dir" / "other.txt"
        other.parent.mkdir(exist_ok=True)
        await client.call_tool("write_file", {"path": str(other), "content": "x"})
        check(f"{label} a directory subscription covers a file beneath it",
              await eventually(lambda: other.as_uri() in updates), str(updates))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.unsubscribe_resource(root.as_uri())
        before = len(updates)
        await client.call_tool("write_file", {"path": str(note), "content": "v3"})
        await asyncio.sleep(1.0)
        check(f"{label} nothing after unsubscribing", len(updates) == before, str(updates[before:]))


async def listen(opts, root: pathlib.Path) -> None:
    client = mcp.Client(opts.url, mode="auto")
    async with client:
        label = f"[auto {client.protocol_version}]"
        note = root / "listen-note.txt"
        note.write_text("v1")
        uri = note.as_uri()
        async with client.listen(resource_subscriptions=[uri, "nobody://served"]) as sub:
            honored = list(sub.honored.resource_subscriptions or [])
            check(f"{label} the listen stream honours only URIs a plugin serves", honored == [uri], str(honored))
            result = await client.call_tool("write_file", {"path": str(note), "content": "v2"})
            check(f"{label} write_file", not result.is_error)
            try:
                event = await asyncio.wait_for(sub.__anext__(), 5)
                check(f"{label} the stream hears the write", getattr(event, "uri", None) == uri, repr(event))
            except asyncio.TimeoutError:
                check(f"{label} the stream hears the write", False, "nothing within 5 s")
        read = await client.read_resource(uri)
        check(f"{label} the resource reads the new content", text(read) == "v2", text(read))


async def run(opts) -> None:
    root = pathlib.Path(opts.root).resolve()
    await legacy(opts, root)
    await listen(opts, root)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("url")
    opts = parser.parse_args()
    return report(run(opts))


if __name__ == "__main__":
    sys.exit(main())
