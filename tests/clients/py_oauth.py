"""The official Python SDK client signing in to a Capsule tenant behind OAuth 2.1: it meets the
401, discovers the protected-resource metadata and the authorization server, registers itself
(RFC 7591), runs authorization code + PKCE with the resource indicator, and then uses the tools
the token grants. The "browser" follows the authorization URL's redirects to the callback,
where the test authorization server's scripted user has signed in and consented.

    py.sh py_oauth.py --user carol URL

Prints one line per check and ends with `N passed, M failed`; exit 1 if any failed.
"""
from __future__ import annotations

import argparse
import json
import sys
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
import mcp
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from checks import check, report

CALLBACK = "http://127.0.0.1:9/callback"


class Memory:
    """Token storage for one run."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """Follows the authorization URL as a browser would, keeping cookies, until the
    authorization server redirects to the callback."""

    def __init__(self) -> None:
        self.landed: str | None = None
        self.visited: list[str] = []

    async def open(self, url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=False) as http:
            for _ in range(20):
                self.visited.append(url)
                if url.startswith(CALLBACK):
                    self.landed = url
                    return
                response = await http.get(url)
                location = response.headers.get("location")
                if location is None:
                    raise RuntimeError(f"the sign-in stopped at {url}: HTTP {response.status_code} {response.text[:300]}")
                url = urljoin(url, location)
        raise RuntimeError(f"too many redirects: {self.visited}")

    async def callback(self) -> AuthorizationCodeResult:
        query = parse_qs(urlparse(self.landed or "").query)
        if "error" in query:
            raise RuntimeError(f"authorization refused: {query}")
        first = lambda key: query.get(key, [None])[0]  # noqa: E731
        return AuthorizationCodeResult(code=first("code") or "", state=first("state"), iss=first("iss"))


def structured(result) -> dict:
    return getattr(result, "structured_content", None) or getattr(result, "structuredContent", None) or {}


async def run(opts) -> None:
    browser = Browser()
    storage = Memory()
    auth = OAuthClientProvider(
        server_url=opts.url,
        client_metadata=OAuthClientMetadata(
            client_name="capsule-test-python",
            redirect_uris=[CALLBACK],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.open,
        callback_handler=browser.callback,
    )
    for mode in ("legacy", "auto"):
        async with httpx2.AsyncClient(auth=auth) as http:
            client = mcp.Client(streamable_http_client(opts.url, http_client=http), mode=mode)
            async with client:
                label = f"[{mode} {client.protocol_version}]"
                tools = sorted(t.name for t in (await client.list_tools()).tools)
                check(f"{label} tools/list after signing in", "add" in tools and "whoami" in tools, str(tools))
                total = await client.call_tool("add", {"a": 2, "b": 3})
                texts = [getattr(c, "text", "") for c in total.content]
                check(f"{label} tools/call with the token", texts == ["5"], str(texts))
                who = structured(await client.call_tool("whoami", {}))
                principal = who.get("principal") or {}
                check(f"{label} the plugin sees the signed-in user", principal.get("subject") == opts.user, json.dumps(who))
                check(
                    f"{label} ...and the registered client",
                    storage.client is not None and principal.get("client") == storage.client.client_id,
                    json.dumps(who),
                )
    check("signed in once, by authorization code", sum(u.startswith(CALLBACK) for u in browser.visited) == 1, str(browser.visited))
    granted = (storage.tokens.scope or "").split() if storage.tokens else []
    check("the token carries the scopes Capsule asked for", {"plugins.calc", "plugins.conformance"} <= set(granted), str(granted))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--user", required=True)
    parser.add_argument("url")
    sys.exit(report(run(parser.parse_args()), seconds=90))
