"""The example plugin every language SDK ships (plugins/python, plugins/js, ...), checked
through the official Python SDK client in modes auto (2026-07-28) and legacy, over HTTP or
stdio: tools with structured output, a schema violation, log and progress notifications, an
elicitation round, a file inside the grant and one outside it, an uncaught exception,
resources, a template, a prompt and completions.

    py.sh py_plugin.py --inside FILE --outside FILE [--two-questions] URL
    py.sh py_plugin.py --inside FILE --outside FILE [--two-questions] --stdio -- CMD [ARG...]

`--two-questions`: the example's `shred` asks a second question after the first (the SDK
examples do, to show that a replayed handler still has the first answer).

Prints one line per check and ends with `N passed, M failed`; exit 1 if any failed.
"""
from __future__ import annotations

import argparse
import sys
import warnings

import mcp
from mcp import types

from checks import check, report

TOOLS = {"stats", "convert", "countdown", "shred", "read_file", "fail"}


def text(result) -> str:
    items = getattr(result, "content", None) or getattr(result, "contents", None) or []
    return "\n".join(getattr(c, "text", "") or "" for c in items)


async def exercise(target, mode: str, opts) -> None:
    logs: list[str] = []
    asked: list[str] = []

    async def on_log(params) -> None:
        logs.append(str(params.data))

    async def on_elicit(context, params):
        asked.append(params.message)
        field = next(iter(params.requested_schema.get("properties", {})), "sure")
        return types.ElicitResult(action="accept", content={field: True})

    client = mcp.Client(target, mode=mode, logging_callback=on_log, log_level="debug",
                        elicitation_callback=on_elicit)
    async with client:
        label = f"[{mode} {client.protocol_version}]"
        if mode == "legacy":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated by 2026-07-28, where the level is per request
                await client.set_logging_level("debug")
        tools = {t.name: t for t in (await client.list_tools()).tools}
        check(f"{label} tools/list", TOOLS <= set(tools), str(sorted(tools)))
        check(f"{label} stats has an output schema", bool(tools.get("stats") and tools["stats"].output_schema))

        result = await client.call_tool("stats", {"text": "hello wide world\nbye"})
        check(f"{label} structured output", not result.is_error and result.structured_content == {
            "words": 4, "lines": 2, "longest": "hello"}, str(result.structured_content))
        result = await client.call_tool("convert", {"value": 1.609344, "unit": "km"})
        check(f"{label} a primitive result is wrapped", result.structured_content == {"result": 1.0},
              str(result.structured_content))

        result = await client.call_tool("convert", {"value": 1, "unit": "parsec"})
        check(f"{label} a schema violation is a tool error", result.is_error and "unit" in text(result), text(result))

        progress: list[tuple[float, float | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total))

        result = await client.call_tool("countdown", {"n": 3}, progress_callback=on_progress)
        check(f"{label} countdown", text(result) == "lift-off", text(result))
        check(f"{label} log notifications", [m for m in logs if "to go" in m] == ["3 to go", "2 to go", "1 to go"],
              str(logs))
        check(f"{label} progress notifications", progress == [(1, 3), (2, 3), (3, 3)], str(progress))

        result = await client.call_tool("shred", {"name": "plan.txt"})
        if opts.two_questions:
            # Two rounds: the first answer must still be known when the second comes back.
            check(f"{label} two elicitation rounds", text(result) == "shredded plan.txt and its backups"
                  and asked == ["Really shred plan.txt?", "Shred the backups of plan.txt too?"],
                  f"{text(result)} asked={asked}")
        else:
            check(f"{label} an elicitation round",
                  text(result) == "shredded plan.txt" and asked == ["Really shred plan.txt?"],
                  f"{text(result)} asked={asked}")

        result = await client.call_tool("read_file", {"path": opts.inside})
        check(f"{label} a file inside the grant", not result.is_error and text(result) == opts.inside_text, text(result))
        result = await client.call_tool("read_file", {"path": opts.outside})
        check(f"{label} a file outside the grant is refused", result.is_error, text(result))

        result = await client.call_tool("fail", {"message": "the disk is on fire"})
        check(f"{label} an uncaught exception", result.is_error and "the disk is on fire" in text(result), text(result))

        resources = [str(r.uri) for r in (await client.list_resources()).resources]
        check(f"{label} resources/list", "notes://index" in resources, str(resources))
        index = await client.read_resource("notes://index")
        check(f"{label} resources/read", text(index) == "limits\nwelcome", repr(text(index)))
        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        check(f"{label} resources/templates/list", "notes://{name}" in templates, str(templates))
        note = await client.read_resource("notes://welcome")
        check(f"{label} a templated read", "fresh sandbox" in text(note), text(note))
        try:
            await client.read_resource("notes://nothing")
            check(f"{label} a missing note is an error", False, "it was read")
        except Exception as e:  # noqa: BLE001 - any error is what is expected
            check(f"{label} a missing note is an error", True, str(e))

        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        review = prompts.get("review")
        check(f"{label} prompts/list", review is not None and [a.name for a in review.arguments] == ["code", "language"]
              and review.arguments[0].required, str(review))
        got = await client.get_prompt("review", {"code": "x = 1", "language": "python"})
        roles = [m.role for m in got.messages]
        check(f"{label} prompts/get", roles == ["user", "assistant"] and "x = 1" in got.messages[0].content.text,
              str(got.messages))

        done = await client.complete(types.ResourceTemplateReference(type="ref/resource", uri="notes://{name}"),
                                     {"name": "name", "value": "w"})
        check(f"{label} completion of a template variable", done.completion.values == ["welcome"],
              str(done.completion.values))
        done = await client.complete(types.PromptReference(type="ref/prompt", name="review"),
                                     {"name": "language", "value": "py"})
        check(f"{label} completion of a prompt argument", done.completion.values == ["python"],
              str(done.completion.values))


async def main(opts) -> None:
    if opts.stdio:
        command = [a for a in opts.target if a != "--"]
        target = mcp.StdioServerParameters(command=command[0], args=command[1:])
    else:
        target = opts.target[0]
    for mode in opts.modes.split(","):
        await exercise(target, mode, opts)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--inside", required=True)
    ap.add_argument("--outside", required=True)
    ap.add_argument("--modes", default="auto,legacy")
    ap.add_argument("--stdio", action="store_true")
    ap.add_argument("--two-questions", action="store_true", help="shred asks about the backups too")
    ap.add_argument("target", nargs=argparse.REMAINDER)
    opts = ap.parse_args()
    with open(opts.inside, encoding="utf-8") as f:
        opts.inside_text = f.read()
    sys.exit(report(main(opts), 180))
