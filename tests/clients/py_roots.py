"""The `files` plugin through the official Python SDK client, with the client declaring its
roots at a folder: reads and writes inside it work, and nothing outside it is reachable, not
even through symlinks planted inside or `..`.

Prints one line per check and ends with `N passed, M failed`; exit 1 if any failed.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import warnings

import mcp
import mcp.types as types

from checks import check, report


def text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def is_error(result) -> bool:
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", None))


async def run(opts) -> None:
    root = pathlib.Path(opts.root).resolve()
    outside = pathlib.Path(opts.outside).resolve()
    asked = 0

    async def list_roots(_context):
        nonlocal asked
        asked += 1
        return types.ListRootsResult(roots=[types.Root(uri=root.as_uri(), name="work")])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # roots are deprecated by SEP-2577, still supported
        client = mcp.Client(opts.url, mode=opts.mode, list_roots_callback=list_roots,
                            client_info=types.Implementation(name="py-roots", version="1.0.0"))
    async with client:
        label = f"[{opts.mode} {client.protocol_version}]"
        result = await client.call_tool("list_roots", {})
        check(f"{label} list_roots shows exactly the client's root", not is_error(result)
              and str(root) in text(result) and str(outside) not in text(result), text(result))
        check(f"{label} the host asked the client for its roots", asked >= 1, f"{asked} roots requests")

        result = await client.call_tool("read_file", {"path": str(root / "inside.txt")})
        check(f"{label} read inside the root", not is_error(result) and text(result) == "hello from inside",
              text(result))
        result = await client.call_tool("list_directory", {"path": str(root)})
        check(f"{label} list the root", not is_error(result) and "inside.txt" in text(result))
        result = await client.call_tool("search_files", {"path": str(root), "pattern": "*.txt"})
        check(f"{label} search inside the root", not is_error(result) and "inside.txt" in text(result)
              and "secret" not in text(result), text(result))

        written = root / f"written-{opts.mode}.txt"
        result = await client.call_tool("write_file", {"path": str(written), "content": "new content"})
        if opts.read_only:
            check(f"{label} write under a read-only grant is refused", is_error(result)
                  and "read-only" in text(result) and not written.exists(), text(result))
        else:
            check(f"{label} write inside the root", not is_error(result)
                  and written.exists() and written.read_text() == "new content", text(result))

        escapes = {
            "absolute path outside": {"path": str(outside / "secret.txt")},
            "dot-dot out of the root": {"path": str(root / ".." / outside.name / "secret.txt")},
            "relative dot-dot": {"path": f"../{outside.name}/secret.txt"},
            "symlinked file inside": {"path": str(root / "link-file")},
            "symlinked directory inside": {"path": str(root / "link-dir" / "secret.txt")},
            "a system file": {"path": "/etc/passwd"},
        }
        for name, args in escapes.items():
            result = await client.call_tool("read_file", args)
            check(f"{label} read via {name} is refused", is_error(result) and "top secret" not in text(result),
                  text(result)[:160])
        result = await client.call_tool("list_directory", {"path": str(outside)})
        check(f"{label} listing outside is refused", is_error(result) and "secret.txt" not in text(result),
              text(result)[:160])
        result = await client.call_tool("list_directory", {"path": str(root / "link-dir")})
        check(f"{label} listing through a symlinked directory is refused", is_error(result)
              and "secret.txt" not in text(result), text(result)[:160])
        target = outside / f"planted-{opts.mode}.txt"
        for name, path in {"outside": target, "through a symlinked directory": root / "link-dir" / target.name}.items():
            result = await client.call_tool("write_file", {"path": str(path), "content": "x"})
            check(f"{label} write {name} is refused", is_error(result) and not target.exists(), text(result)[:160])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", required=True, choices=["legacy", "auto"])
    parser.add_argument("--root", required=True)
    parser.add_argument("--outside", required=True)
    parser.add_argument("--read-only", action="store_true")
    parser.add_argument("url")
    opts = parser.parse_args()
    return report(run(opts))


if __name__ == "__main__":
    sys.exit(main())
