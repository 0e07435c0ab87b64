"""`capsule-py build app.py -o app.wasm`: a Python module of decorated functions into a
Capsule plugin component, with componentize-py.

The SDK is copied beside a generated entry module that imports the app (registering its
functions) and the SDK's export classes, so componentize-py bundles only the app, what it
imports and the SDK. A `capsule.toml` beside the app (or `--needs FILE`) declaring the
plugin's needs is embedded in the component, where `capsule serve` and `capsule check` read
it.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SDK = Path(__file__).resolve().parent
NEEDS_SECTION = "capsule:needs"


def _leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def custom_section(name: str, data: bytes) -> bytes:
    """A WebAssembly custom section; valid at the top level of a component."""
    encoded = name.encode()
    payload = _leb128(len(encoded)) + encoded + data
    return b"\x00" + _leb128(len(payload)) + payload


def build(app: Path, out: Path, world: str, needs: Path | None, python_path: list[Path]) -> None:
    if not app.is_file():
        raise SystemExit(f"capsule-py: no such file: {app}")
    if needs is not None and not needs.is_file():
        raise SystemExit(f"capsule-py: no such file: {needs}")
    with tempfile.TemporaryDirectory(prefix="capsule-py-") as tmp:
        work = Path(tmp)
        shutil.copytree(SDK, work / "capsule_sdk", ignore=shutil.ignore_patterns("wit", "__pycache__", "build.py"))
        (work / "capsule_main.py").write_text(
            f"import {app.stem}  # noqa: F401 - registers the plugin's functions\n"
            "from capsule_sdk.exports import Completion, Prompts, Resources, Tools  # noqa: F401\n"
        )
        command = [sys.executable, "-c", "import sys; from componentize_py import script; sys.exit(script())", "-d", str(SDK / "wit"), "-w", world,
                   "componentize", "capsule_main", "-p", str(work), "-p", str(app.resolve().parent)]
        for p in python_path:
            command += ["-p", str(p)]
        command += ["-o", str(work / "plugin.wasm")]
        done = subprocess.run(command)
        if done.returncode != 0:
            raise SystemExit(f"capsule-py: componentize-py failed ({done.returncode})")
        component = (work / "plugin.wasm").read_bytes()
    if needs is not None:
        component += custom_section(NEEDS_SECTION, needs.read_bytes())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(component)
    print(f"capsule-py: wrote {out} ({len(component) // 1024} KiB)", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="capsule-py", description="Build Capsule plugins written in Python.")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build a plugin component from a Python module")
    b.add_argument("app", type=Path, help="the module that defines the plugin (app.py)")
    b.add_argument("-o", "--output", type=Path, help="the component to write (default: APP.wasm)")
    b.add_argument("--needs", type=Path, help="the needs declaration to embed (default: capsule.toml beside APP)")
    b.add_argument("-p", "--python-path", type=Path, action="append", default=[],
                   help="another directory of pure-Python modules the app imports")
    b.add_argument("--world", default="plugin", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    needs = args.needs
    if needs is None and (args.app.parent / "capsule.toml").is_file():
        needs = args.app.parent / "capsule.toml"
    build(args.app, args.output or args.app.with_suffix(".wasm"), args.world, needs, args.python_path)


if __name__ == "__main__":
    main()
