#!/usr/bin/env python3
"""A structure-aware fuzzer for any MCP server, over Streamable HTTP or stdio (stdlib only).

    fuzz.py [--seconds S] [--seed N] [--answer-within S] --http URL
    fuzz.py [--seconds S] [--seed N] [--answer-within S] --stdio -- COMMAND ARGS...

It reads the server's catalog (tools, resources, templates, prompts), builds valid requests
from the tools' input schemas and the other listings, for every protocol revision (stateless
2026-07-28 requests, and sessions at 2024-11-05 ... 2025-11-25 with batches at 2025-03-26), then
mutates them: the JSON tree (dropped, retyped and added members, deep nesting, other methods),
the bytes (cut, flipped, invalid UTF-8, trailing text, two messages at once) and the headers
(protocol version, method and name mirrors, session id, Origin, Host, Accept, Content-Type).
Over HTTP it also sends DELETEs and opens and drops GET streams with odd Last-Event-IDs.

Some requests and sessions declare the client capabilities (elicitation, sampling, roots): the
fuzzer then answers what the server asks, a stateless request's `input_required` result by
retrying it with `inputResponses` and its `requestState`, a session's server-to-client
requests on the response stream by POSTing the answers (over stdio, by writing them), and it
mutates those too: answers of the wrong shape, errors, other ids, answers sent twice, states
cut, flipped or taken from another request, streams dropped while the server waits. Every
request must still be answered in time. A finding is any of: a 5xx (other than a session limit's 503), a
reply that is not JSON-RPC, an internal error (-32603), a reply to another id, no reply in
time, a dropped connection, or a failed liveness check (`tools/list`) every 50 requests. Over
stdio every well-formed request must be answered and the server must exit 0 on EOF. Exits 1
with the findings listed, 0 when there are none; the seed reproduces a run.
"""
import argparse
import http.client
import json
import queue
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

sys.setrecursionlimit(20000)
MODERN = "2026-07-28"
LEGACY = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]
ANSWER_WITHIN = 12.0
R = random.Random()


class Findings:
    """What went wrong; the first few of each kind are kept whole, the rest counted."""
    KEPT = 5

    def __init__(self):
        self.items = []
        self.kinds = {}

    def add(self, kind, detail, sent):
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if self.kinds[kind] <= self.KEPT:
            sent = sent if isinstance(sent, str) else repr(sent)
            self.items.append(f"{kind}: {detail}\n    sent: {sent[:400]}")
            print(f"FINDING {self.items[-1]}", flush=True)

    def count(self):
        return sum(self.kinds.values())


FINDINGS = Findings()
# How often the server asked: input_required rounds answered, server-to-client requests seen.
ASKED = {"input rounds": 0, "server requests": 0}


# ---- valid requests, from the catalog ---------------------------------------------------


def example(schema, defs, depth=0):
    """A value the schema accepts, for the common shapes of tool input schemas."""
    if not isinstance(schema, dict) or depth > 8:
        return {}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target = defs
        for part in ref[2:].split("/")[1:]:
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return example(target, defs, depth + 1)
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return example(schema[key][0], defs, depth + 1)
    if schema.get("allOf"):
        merged = {}
        for part in schema["allOf"]:
            value = example(part, defs, depth + 1)
            if isinstance(value, dict):
                merged.update(value)
        return merged
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "string":
        return "a" * max(1, schema.get("minLength", 1))
    if kind in ("number", "integer"):
        return max(1, schema.get("minimum", 1))
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    if kind == "array":
        return [example(schema.get("items", {}), defs, depth + 1) for _ in range(max(1, schema.get("minItems", 1)))]
    props = schema.get("properties", {})
    return {name: example(props[name], defs, depth + 1) for name in schema.get("required", list(props)) if name in props}


class Catalog:
    def __init__(self, listings):
        self.tools = listings.get("tools", [])
        self.resources = [r["uri"] for r in listings.get("resources", [])]
        self.templates = [t["uriTemplate"] for t in listings.get("resourceTemplates", [])]
        self.prompts = listings.get("prompts", [])

    def tool_call(self):
        if not self.tools:
            return {"name": "missing", "arguments": {}}
        tool = R.choice(self.tools)
        schema = tool.get("inputSchema", {})
        params = {"name": tool["name"], "arguments": example(schema, schema)}
        # SEP-2243: the values a client mirrors into Mcp-Param-* headers.
        params["_headers"] = {f"mcp-param-{p['x-mcp-header']}".lower(): str(params["arguments"].get(n, ""))
                              for n, p in schema.get("properties", {}).items() if isinstance(p, dict) and "x-mcp-header" in p}
        return params

    def uri(self):
        choices = self.resources + [self.fill(t) for t in self.templates]
        return R.choice(choices + ["file:///etc/passwd", "x://../../", ""])

    @staticmethod
    def fill(template):
        out, i = "", 0
        while i < len(template):
            if template[i] == "{":
                j = template.find("}", i)
                out += R.choice(["7", "a b", "%00", "..", "x" * 300, "length"])
                i = j + 1 if j > 0 else len(template)
            else:
                out += template[i]
                i += 1
        return out

    def params(self, method):
        if method == "tools/call":
            return self.tool_call()
        if method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
            return {"uri": self.uri()}
        if method == "prompts/get":
            if not self.prompts:
                return {"name": "missing"}
            prompt = R.choice(self.prompts)
            return {"name": prompt["name"], "arguments": {a["name"]: "a" for a in prompt.get("arguments", [])}}
        if method == "completion/complete":
            refs = [{"type": "ref/prompt", "name": p["name"]} for p in self.prompts]
            refs += [{"type": "ref/resource", "uri": t} for t in self.templates]
            ref = R.choice(refs or [{"type": "ref/prompt", "name": "missing"}])
            return {"ref": ref, "argument": {"name": R.choice(["a", "text", "style", "id"]), "value": R.choice(["", "b", "le"])}}
        if method == "logging/setLevel":
            return {"level": R.choice(["debug", "error", "emergency", "bogus"])}
        if method.endswith("/list"):
            return R.choice([{}, {}, {"cursor": R.choice(["", "0", "abc", "9" * 40])}])
        return {}


METHODS = ["tools/call"] * 6 + ["tools/list", "resources/list", "resources/read", "resources/read", "prompts/get",
           "resources/templates/list", "prompts/list", "completion/complete", "logging/setLevel", "ping",
           "resources/subscribe", "resources/unsubscribe", "server/discover", "tasks/list", "no/such-method"]


def modern_meta():
    return {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "capsule-fuzz", "version": "1"}}


ASKING_CAPABILITIES = [
    {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {"listChanged": True}},
    {"elicitation": {}}, {"sampling": {}}, {"roots": {}}, {"elicitation": {"url": {}}}]
STATES = []


# Requests the server answered by asking the client, as (method, params): tried again more
# often, the way a coverage-guided fuzzer keeps the inputs that reached somewhere new.
ASKERS = []


def remember_asker(method, params):
    entry = (method, json.dumps(params))
    if entry not in ASKERS:
        ASKERS.append(entry)
        del ASKERS[:-30]


def pick(catalog, methods):
    """A method and valid params for it: fresh from the catalog, or one that asked before."""
    if ASKERS and R.random() < 0.3:
        method, params = R.choice(ASKERS)
        return method, json.loads(params)
    method = R.choice(methods)
    return method, catalog.params(method)


def asking_capabilities():
    return json.loads(json.dumps(R.choice(ASKING_CAPABILITIES)))


def answer(method, params):
    """What a client answers to an input request or a server-to-client request: valid for its
    method, or (two times in five) mutated."""
    params = params if isinstance(params, dict) else {}
    if method == "elicitation/create":
        schema = params.get("requestedSchema", {})
        accepted = {"action": "accept"} if params.get("mode") == "url" else {"action": "accept", "content": example(schema, schema)}
        result = R.choice([accepted, accepted, {"action": "decline"}, {"action": "cancel"}])
    elif method == "sampling/createMessage":
        result = {"role": "assistant", "content": {"type": "text", "text": R.choice(["fuzz", "", "x" * 5000])},
                  "model": "capsule-fuzz", "stopReason": "endTurn"}
    elif method == "roots/list":
        uri = R.choice(["file:///tmp", "file:///", "file:///nonexistent/x", "file:///tmp/../etc", "http://example.com/", ""])
        result = {"roots": [{"uri": uri, "name": "r"}] * R.randrange(0, 3)}
    else:
        result = {}
    return mutate(result) if R.random() < 0.4 else result


CAPABILITY_ASKED = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}


def check_offered(asked, capabilities, where):
    """A server asks a client only for what it offers (a ping needs nothing)."""
    method = asked.get("method")
    if method != "ping" and CAPABILITY_ASKED.get(method) not in capabilities:
        FINDINGS.add("asked for what the client does not offer", f"{method} of a client offering {capabilities}", where)


def answers(asked):
    """The messages a client sends for a server-to-client request: its answer (whose result may
    be mutated), sometimes after a wrong one (an error, a mutated envelope, another id, a
    batch) or twice. The last always has a well-formed envelope naming the request, so a
    server that takes what JSON-RPC allows never waits on a client that did answer."""
    ASKED["server requests"] += 1
    sid = asked.get("id")
    message = {"jsonrpc": "2.0", "id": sid, "result": answer(asked.get("method"), asked.get("params"))}
    roll = R.random()
    if roll < 0.1:
        error = R.choice([{"code": -32601, "message": "no"}, {"code": "x"}, {"code": -1, "message": "x" * 70000}, value()])
        return [{"jsonrpc": "2.0", "id": sid, "error": error}, message]
    if roll < 0.2:
        return [mutate(message), message]
    if roll < 0.25:
        return [dict(message, id=R.choice([sid + 1000 if isinstance(sid, int) else 1, str(sid), None])), message, message]
    if roll < 0.3:
        return [[message, message], message]
    return [message]


def tampered(state):
    """A `requestState` as the client echoes it: mostly as it came, sometimes not."""
    roll = R.random()
    if not isinstance(state, str) or roll < 0.6:
        return state
    if roll < 0.7:
        return None
    if roll < 0.8 and state:
        at = R.randrange(len(state))
        return state[:at] + R.choice("A0_-~=.") + state[at + 1:]
    if roll < 0.9 and STATES:
        return R.choice(STATES)
    return R.choice([state[: len(state) // 2], state + "x", "", "x" * 100000, 7])


# ---- mutations --------------------------------------------------------------------------


def scalar():
    return R.choice([None, True, False, 0, -1, 2**53 + 1, 10**30, 1e308, -0.0, 1.5, "", "x" * R.randrange(1, 70000),
                     "\u0000\u202e\U0001F600", "tools/call", "../../", "%s%n", "null", "2025-03-26"])


def value(depth=0):
    if depth > 3 or R.random() < 0.5:
        return scalar()
    if R.random() < 0.5:
        return [value(depth + 1) for _ in range(R.randrange(4))]
    return {R.choice(["a", "name", "_meta", "uri", "arguments", "", "id", "x" * 300]): value(depth + 1)
            for _ in range(R.randrange(4))}


def paths(tree, prefix=()):
    yield prefix
    if isinstance(tree, dict):
        for key, item in tree.items():
            yield from paths(item, prefix + (key,))
    elif isinstance(tree, list):
        for index, item in enumerate(tree):
            yield from paths(item, prefix + (index,))


def mutate(message):
    message = json.loads(json.dumps(message))
    for _ in range(R.randrange(1, 4)):
        found = list(paths(message))[1:]
        if not found:
            return value()
        path = R.choice(found)
        parent = message
        for key in path[:-1]:
            parent = parent[key]
        key, op = path[-1], R.randrange(6)
        if op == 0 and isinstance(parent, dict):
            del parent[key]
        elif op == 1:
            parent[key] = value()
        elif op == 2 and isinstance(parent, dict):
            parent[R.choice(["extra", "_meta", "cursor", "task", "progressToken", "name", "jsonrpc"])] = value()
        elif op == 3:
            nested = scalar()
            for _ in range(R.choice([2, 50, 200, 800])):
                nested = [nested] if R.random() < 0.5 else {"a": nested}
            parent[key] = nested
        elif op == 4:
            parent[key] = R.choice(METHODS + ["initialize", "notifications/cancelled", "roots/list", ""])
        else:
            parent[key] = [parent[key]]
    return message


def mutate_bytes(body):
    data = bytearray(body)
    op = R.randrange(6)
    if op == 0:
        del data[R.randrange(len(data)):]
    elif op == 1:
        for _ in range(R.randrange(1, 5)):
            data[R.randrange(len(data))] = R.randrange(256)
    elif op == 2:
        at = R.randrange(len(data) + 1)
        data[at:at] = R.choice([b"\xff\xfe", b"\\ud800", b"}", b",", b'"', b"\x00", b"\xef\xbb\xbf", b"\xc0\x80"])
    elif op == 3:
        data += R.choice([b" ", b"x", b"{}", b"\n{}", b"]"])
    elif op == 4:
        depth = R.choice([129, 1000, 100000])
        data = bytearray(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + b'{"a":' * depth + b"1" + b"}" * (depth + 2))
    else:
        data = b"[" + data + b"," + data + b"]"
    return bytes(data)


def request_id(message):
    if isinstance(message, dict) and "method" in message:
        rid = message.get("id")
        if isinstance(rid, (int, str)) and not isinstance(rid, bool):
            return rid
    return None


def check_messages(data, sent, rid, single):
    try:
        parsed = json.loads(data)
    except ValueError:
        FINDINGS.add("not JSON", data[:200], sent)
        return []
    messages = parsed if isinstance(parsed, list) else [parsed]
    for m in messages:
        if not isinstance(m, dict) or m.get("jsonrpc") != "2.0":
            FINDINGS.add("not JSON-RPC", json.dumps(m)[:200], sent)
        elif "method" in m:
            continue
        elif ("result" in m) == ("error" in m):
            FINDINGS.add("neither result nor error", json.dumps(m)[:200], sent)
        elif "error" in m and (not isinstance(m["error"].get("code"), int) or not isinstance(m["error"].get("message"), str)):
            FINDINGS.add("malformed error", json.dumps(m)[:200], sent)
        elif "error" in m and m["error"]["code"] == -32603:
            FINDINGS.add("internal error", json.dumps(m)[:300], sent)
        elif single and rid is not None and m.get("id") not in (rid, None):
            FINDINGS.add("reply to another id", f"{m.get('id')!r} for {rid!r}", sent)
    return messages


# ---- HTTP -------------------------------------------------------------------------------


class Http:
    def __init__(self, url):
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = parts.hostname, parts.port or 80, parts.path or "/mcp"
        self.conn = None
        self.sent = 0
        self.statuses = {}

    def send(self, method, body, headers, timeout=None):
        timeout = timeout or ANSWER_WITHIN
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            try:
                self.conn.timeout = timeout
                if self.conn.sock:
                    self.conn.sock.settimeout(timeout)
                self.conn.request(method, self.path, body, headers)
                response = self.conn.getresponse()
                data = response.read()
                if response.will_close:
                    self.conn.close()
                    self.conn = None
                self.sent += 1
                self.statuses[response.status] = self.statuses.get(response.status, 0) + 1
                return response.status, {k.lower(): v for k, v in response.getheaders()}, data
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as error:
                self.conn.close()
                self.conn = None
                # A kept-alive connection the server closed between requests is normal: retry
                # once on a new one.
                if attempt == 1:
                    return None, {}, repr(error).encode()
            except socket.timeout:
                self.conn.close()
                self.conn = None
                return "timeout", {}, b""
            except http.client.HTTPException as error:
                self.conn.close()
                self.conn = None
                return None, {}, repr(error).encode()
        return None, {}, b""

    def exchange(self, body, headers, message, what, on_request):
        """POST on a connection of its own and read an event-stream answer as it comes, handing
        each server-to-client request to `on_request` (which answers it, or returns False to
        hang up) while the server waits."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=ANSWER_WITHIN)
        try:
            conn.request("POST", self.path, body, headers)
            response = conn.getresponse()
            headers_in = {k.lower(): v for k, v in response.getheaders()}
            self.sent += 1
            self.statuses[response.status] = self.statuses.get(response.status, 0) + 1
            if "text/event-stream" not in headers_in.get("content-type", ""):
                data = response.read()
                self.check(response.status, headers_in, data, what, request_id(message))
                return
            rid = request_id(message)
            # Keep-alive comments must not stretch the wait: the whole answer is due in time.
            deadline = time.time() + ANSWER_WITHIN
            while True:
                if time.time() > deadline:
                    raise socket.timeout()
                if conn.sock:
                    conn.sock.settimeout(max(0.05, deadline - time.time()))
                line = response.readline()
                if not line:
                    return
                if not line.startswith(b"data:") or not line[5:].strip():
                    continue
                for m in check_messages(line[5:], what, rid, False):
                    if isinstance(m, dict) and "method" in m and "id" in m and on_request(m) is False:
                        return
                    if isinstance(m, dict) and rid is not None and m.get("id") == rid and "method" not in m:
                        return
        except socket.timeout:
            FINDINGS.add("no answer", f"within {ANSWER_WITHIN} s", what)
        except (http.client.HTTPException, ConnectionError) as error:
            FINDINGS.add("connection dropped", repr(error), what)
        finally:
            conn.close()

    def post(self, body, headers, message, what):
        status, headers_in, data = self.send("POST", body, headers)
        self.check(status, headers_in, data, what, request_id(message))
        return status, headers_in, data

    def check(self, status, headers, data, sent, rid):
        if status is None:
            FINDINGS.add("connection dropped", data.decode(errors="replace"), sent)
        elif status == "timeout":
            FINDINGS.add("no answer", f"within {ANSWER_WITHIN} s", sent)
        elif status >= 500 and not (status == 503 and b"live sessions" in data):
            FINDINGS.add(f"HTTP {status}", data[:300], sent)
        elif "application/json" in headers.get("content-type", "") and data:
            check_messages(data, sent, rid, True)
        elif "text/event-stream" in headers.get("content-type", ""):
            for text in event_data(data):
                check_messages(text.encode(), sent, rid, False)

    def catalog(self):
        listings = {}
        for method, key in (("tools/list", "tools"), ("resources/list", "resources"),
                            ("resources/templates/list", "resourceTemplates"), ("prompts/list", "prompts")):
            _, _, data = self.send("POST", json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": modern_meta()}}),
                                   {"content-type": "application/json", "accept": "application/json, text/event-stream",
                                    "mcp-protocol-version": MODERN, "mcp-method": method})
            listings[key] = json.loads(data).get("result", {}).get(key, [])
        return Catalog(listings)

    def alive(self):
        body = json.dumps({"jsonrpc": "2.0", "id": "alive", "method": "tools/list", "params": {"_meta": modern_meta()}})
        status, _, data = Http(f"http://{self.host}:{self.port}{self.path}").send(
            "POST", body, {"content-type": "application/json", "accept": "application/json, text/event-stream",
                           "mcp-protocol-version": MODERN, "mcp-method": "tools/list"})
        if status != 200 or b'"tools"' not in data:
            FINDINGS.add("liveness", f"tools/list answered {status}: {data[:200]!r}", body)


def modern_headers(method, params):
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": MODERN, "mcp-method": method}
    name = params.get("name") or params.get("uri")
    if isinstance(name, str) and method in ("tools/call", "resources/read", "prompts/get"):
        headers["mcp-name"] = name
    headers.update(params.pop("_headers", {}))
    if R.random() < 0.3:
        for _ in range(R.randrange(1, 3)):
            key = R.choice(list(headers) + ["origin", "host", "mcp-session-id", "last-event-id", "mcp-param-x"])
            op = R.randrange(4)
            if op == 0:
                headers.pop(key, None)
            elif op == 1:
                headers[key] = R.choice(["", "2025-03-26", "bogus", "http://evil.example", "a" * 9000, "tools/call",
                                         "=?base64?AAAA?=", "1", "text/plain", "*/*", "evil.example:80"])
            elif op == 2:
                headers[key] = headers.get(key, "") + R.choice([" ", ",x", "\t"])
            else:
                headers[key] = "x"
    return headers


def dig(tree, *keys):
    """`tree[k1][k2]...`, or None where a step is missing or not an object."""
    for key in keys:
        tree = tree.get(key) if isinstance(tree, dict) else None
    return tree


def event_data(data):
    """The non-empty `data:` fields of an event stream's text."""
    return [line[5:] for line in data.decode(errors="replace").splitlines() if line.startswith("data:") and line[5:].strip()]


def replies(headers, data):
    """The JSON-RPC messages of a response, whether it came as JSON or as an event stream."""
    if "text/event-stream" in headers.get("content-type", ""):
        texts = event_data(data)
    else:
        texts = [data.decode(errors="replace")]
    messages = []
    for text in texts:
        try:
            parsed = json.loads(text)
        except ValueError:
            continue
        messages += parsed if isinstance(parsed, list) else [parsed]
    return [m for m in messages if isinstance(m, dict)]


def stateless(http, catalog):
    method, params = pick(catalog, METHODS)
    original = json.loads(json.dumps(params))
    headers = modern_headers(method, params)
    params["_meta"] = modern_meta()
    # A request that may be asked for input declares what the client offers; its answers
    # and retries are then fuzzed more than the request itself.
    asking = method in ("tools/call", "prompts/get", "resources/read") and R.random() < 0.35
    if asking:
        params["_meta"]["io.modelcontextprotocol/clientCapabilities"] = asking_capabilities()
    message = {"jsonrpc": "2.0", "id": R.choice([1, "s", 0, -5, 2**40]), "method": method, "params": params}
    if R.random() < (0.2 if asking else 0.7):
        message = mutate(message)
    body = json.dumps(message).encode("utf-8", "surrogatepass")
    if R.random() < (0.05 if asking else 0.15):
        body, message = mutate_bytes(body), None
    status, headers_in, data = http.post(body, headers, message, body.decode(errors="replace"))
    rounds = 0
    while asking and isinstance(message, dict) and status == 200 and rounds < 6:
        rounds += 1
        result = next((m.get("result") for m in replies(headers_in, data) if "result" in m), None)
        if not isinstance(result, dict) or result.get("resultType") != "input_required":
            return
        remember_asker(method, original)
        state = result.get("requestState")
        if isinstance(state, str):
            STATES.append(state)
            del STATES[:-50]
        asked = result.get("inputRequests")
        asked = asked if isinstance(asked, dict) else {}
        offered = dig(message, "params", "_meta", "io.modelcontextprotocol/clientCapabilities")
        for r in asked.values():
            check_offered(r if isinstance(r, dict) else {}, offered if isinstance(offered, dict) else {}, json.dumps(message)[:400])
        ASKED["input rounds"] += 1
        responses = {key: answer(r.get("method"), r.get("params")) for key, r in asked.items() if isinstance(r, dict)}
        roll = R.random()
        if roll < 0.1 and responses:
            responses.pop(R.choice(list(responses)))
        elif roll < 0.2:
            responses[R.choice(["unknown", "capsule.roots", "", "x" * 300])] = answer(R.choice(["roots/list", "x"]), {})
        elif roll < 0.25:
            responses = value()
        retry = json.loads(json.dumps(message))
        if not isinstance(retry, dict) or not isinstance(retry.get("params"), dict):
            return
        retry["id"] = R.choice([rounds + 100, f"retry{rounds}", message.get("id")])
        retry["params"]["inputResponses"] = responses
        state = tampered(state)
        if state is not None:
            retry["params"]["requestState"] = state
        body = json.dumps(retry).encode("utf-8", "surrogatepass")
        status, headers_in, data = http.post(body, headers, retry, body.decode(errors="replace"))
        message = retry


class Session:
    def __init__(self, http):
        self.version = R.choice(LEGACY)
        self.headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        # Half the sessions offer what a server may ask for, and get asked.
        self.capabilities = asking_capabilities() if R.random() < 0.5 else {}
        message = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": self.version, "capabilities": self.capabilities,
            "clientInfo": {"name": "capsule-fuzz", "version": "1"}}}
        _, headers, _ = http.post(json.dumps(message), self.headers, message, "initialize")
        self.id = headers.get("mcp-session-id")
        self.headers["mcp-protocol-version"] = self.version
        if self.id:
            self.headers["mcp-session-id"] = self.id
        http.post(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), self.headers, None, "initialized")

    def request(self, http, catalog):
        method, params = pick(catalog, [m for m in METHODS if m != "server/discover"])
        original = json.loads(json.dumps(params))
        params.pop("_headers", None)
        make = lambda i: {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
        roll = R.random()
        if roll < 0.15 and self.version == "2025-03-26":
            message = [mutate(make(i)) if R.random() < 0.5 else make(i) for i in range(R.randrange(0, 6))]
        elif roll < 0.25:
            message = R.choice([{"jsonrpc": "2.0", "id": R.randrange(100), "result": value()},
                                {"jsonrpc": "2.0", "id": R.randrange(100), "error": {"code": -1, "message": "no"}},
                                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": value()}},
                                {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
                                {"jsonrpc": "2.0", "method": "notifications/progress", "params": value()}])
        else:
            message = mutate(make(R.randrange(1000))) if R.random() < 0.6 else make(R.randrange(1000))
        headers = dict(self.headers)
        if self.id and R.random() < 0.05:
            headers["mcp-session-id"] = R.choice(["", "nope", self.id + "x", "a" * 500])
        body = json.dumps(message).encode("utf-8", "surrogatepass")
        if R.random() < 0.1:
            body, message = mutate_bytes(body), None
        if self.capabilities:
            asked = lambda m: remember_asker(method, original) or self.reply(http, m)
            http.exchange(body, headers, message, body.decode(errors="replace"), asked)
        else:
            http.post(body, headers, message, body.decode(errors="replace"))

    def reply(self, http, asked):
        """Answer a server-to-client request, or return False to hang up instead."""
        check_offered(asked, self.capabilities, f"session {self.id}")
        if R.random() < 0.05:
            return False
        headers = dict(self.headers)
        for each in answers(asked):
            body = json.dumps(each).encode("utf-8", "surrogatepass")
            status, headers_in, data = Http(f"http://{http.host}:{http.port}{http.path}").send("POST", body, headers)
            http.check(status, headers_in, data, f"answer to {asked.get('method')}: {body[:300]!r}", None)
        return True

    def end_or_stream(self, http):
        """DELETE the session (True) or open its GET stream and hang up at once."""
        headers = {"accept": "text/event-stream", "mcp-protocol-version": self.version}
        if self.id:
            headers["mcp-session-id"] = self.id
        if R.random() < 0.5:
            headers["last-event-id"] = R.choice(["0", "1", "-1", "9" * 25, "abc", self.id or "", "0/0", ""])
        if R.random() < 0.3:
            status, headers_in, data = http.send("DELETE", None, headers)
            http.check(status, headers_in, data, f"DELETE {headers}", None)
            return True
        request = f"GET {http.path} HTTP/1.1\r\nHost: {http.host}:{http.port}\r\n"
        request += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        with socket.create_connection((http.host, http.port), timeout=ANSWER_WITHIN) as raw:
            raw.sendall(request.encode())
            try:
                head = raw.recv(4096)
                if not head:
                    FINDINGS.add("connection dropped", "GET stream closed without a status line", request)
                elif head.startswith(b"HTTP/1.1 5"):
                    FINDINGS.add("HTTP 5xx", head[:200], request)
            except socket.timeout:
                FINDINGS.add("no answer", "GET stream sent no head", request)
        return False


def fuzz_http(url, seconds):
    http = Http(url)
    catalog = http.catalog()
    sessions, n, end = [], 0, time.time() + seconds
    while time.time() < end:
        n += 1
        roll = R.random()
        if roll < 0.45:
            stateless(http, catalog)
        elif roll < 0.5 or not sessions:
            if len(sessions) > 6:
                old = sessions.pop(0)
                if old.id:
                    http.send("DELETE", None, {"mcp-session-id": old.id, "mcp-protocol-version": old.version})
            sessions.append(Session(http))
        elif roll < 0.95:
            R.choice(sessions).request(http, catalog)
        else:
            session = R.choice(sessions)
            if session.end_or_stream(http):
                sessions.remove(session)
        if n % 50 == 0:
            http.alive()
    http.alive()
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(http.statuses.items()))
    return f"{n} rounds, {http.sent} HTTP requests answered ({statuses})"


# ---- stdio ------------------------------------------------------------------------------


class Stdio:
    def __init__(self, command):
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.answered = {}
        self.lock = threading.Condition()
        self.writing = threading.Lock()
        # Half the runs offer what a server may ask for; the reader answers what it asks,
        # through a thread of its own, so that it never stops reading while a write waits.
        self.capabilities = asking_capabilities() if R.random() < 0.5 else {}
        self.answers = queue.Queue()
        threading.Thread(target=self.read, daemon=True).start()
        threading.Thread(target=lambda: [self.send(line) for line in iter(self.answers.get, None)], daemon=True).start()

    def read(self):
        for line in self.process.stdout:
            for m in check_messages(line, "(stdio output)", None, False):
                if isinstance(m, dict) and "id" in m and "method" in m:
                    check_offered(m, self.capabilities, "(stdio)")
                    for each in answers(m):
                        self.answers.put(json.dumps(each).encode("utf-8", "surrogatepass"))
                elif isinstance(m, dict) and "id" in m and ("result" in m or "error" in m):
                    with self.lock:
                        self.answered[json.dumps(m["id"])] = m
                        self.lock.notify_all()

    def send(self, line):
        with self.writing:
            try:
                self.process.stdin.write(line + b"\n")
                self.process.stdin.flush()
            except (BrokenPipeError, ValueError):
                # The server is gone (a finding of its own), or the run closed its stdin.
                pass

    def call(self, rid, method, params):
        self.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode())
        with self.lock:
            self.lock.wait_for(lambda: json.dumps(rid) in self.answered, timeout=ANSWER_WITHIN)
            return self.answered.get(json.dumps(rid), {})


def fuzz_stdio(command, seconds):
    stdio = Stdio(command)
    version = R.choice(LEGACY)
    stdio.call("init", "initialize", {"protocolVersion": version, "capabilities": stdio.capabilities,
                                      "clientInfo": {"name": "capsule-fuzz", "version": "1"}})
    stdio.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    listings = {}
    for method, key in (("tools/list", "tools"), ("resources/list", "resources"),
                        ("resources/templates/list", "resourceTemplates"), ("prompts/list", "prompts")):
        listings[key] = stdio.call(method, method, {}).get("result", {}).get(key, [])
    catalog = Catalog(listings)
    expected, n, end = [], 0, time.time() + seconds
    while time.time() < end and stdio.process.poll() is None:
        n += 1
        method = R.choice([m for m in METHODS if m != "server/discover"])
        params = catalog.params(method)
        params.pop("_headers", None)
        message = {"jsonrpc": "2.0", "id": f"r{n}", "method": method, "params": params}
        roll = R.random()
        if roll < 0.5:
            stdio.send(json.dumps(message).encode())
            expected.append(json.dumps(f"r{n}"))
        elif roll < 0.6:
            # Batches whose ids repeat, within a batch and across batches in flight.
            stdio.send(json.dumps([dict(message, id=R.choice([1, 2, f"r{n}"])) for _ in range(R.randrange(1, 4))]).encode())
        elif roll < 0.8:
            stdio.send(json.dumps(mutate(message)).encode("utf-8", "surrogatepass"))
        elif roll < 0.95:
            stdio.send(mutate_bytes(json.dumps(message).encode()).replace(b"\n", b" "))
        else:
            stdio.send(R.choice([b"", b"   ", b"\xff\xfe\xfd", b"{" * 200000, b'"' + b"a" * 5_000_000 + b'"', b"[]", b"null", b"\r"]))
        if n % 200 == 0:
            time.sleep(0.1)
    if stdio.process.poll() is not None:
        FINDINGS.add("exited", f"the server exited with {stdio.process.returncode} mid-run", "")
    deadline = time.time() + ANSWER_WITHIN
    with stdio.lock:
        stdio.lock.wait_for(lambda: all(e in stdio.answered for e in expected), timeout=max(0.0, deadline - time.time()))
        missing = [e for e in expected if e not in stdio.answered]
    if missing:
        FINDINGS.add("no answer", f"{len(missing)} well-formed requests unanswered, e.g. {missing[:5]}", "")
    stdio.process.stdin.close()
    try:
        code = stdio.process.wait(timeout=20)
        if code != 0:
            FINDINGS.add("exit status", f"{code} after EOF", "")
    except subprocess.TimeoutExpired:
        stdio.process.kill()
        FINDINGS.add("no exit", "still running 20 s after EOF", "")
    return f"{n} lines, {len(expected)} well-formed requests answered"


def main():
    global ANSWER_WITHIN
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--answer-within", type=float, default=ANSWER_WITHIN, help="seconds a request may take")
    parser.add_argument("--http")
    parser.add_argument("--stdio", action="store_true", help="run the command after --")
    argv = sys.argv[1:]
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:len(argv) - len(command) - (1 if command else 0)])
    R.seed(args.seed)
    ANSWER_WITHIN = args.answer_within
    if args.http:
        summary = fuzz_http(args.http, args.seconds)
    elif args.stdio and command:
        summary = fuzz_stdio(command, args.seconds)
    else:
        parser.error("give --http URL or --stdio -- COMMAND")
    asked = ", ".join(f"{v} {k}" for k, v in ASKED.items())
    print(f"seed {args.seed}: {summary}, {asked}; {FINDINGS.count()} findings")
    for finding in FINDINGS.items:
        print(f"  {finding}")
    for kind, n in FINDINGS.kinds.items():
        if n > Findings.KEPT:
            print(f"  ... and {n - Findings.KEPT} more of \"{kind}\"")
    sys.exit(1 if FINDINGS.kinds else 0)


if __name__ == "__main__":
    main()
