"""web_fetch attacks: SSRF ranges (decided without connecting), DNS rebinding, redirects into the
private network, slow pages, and allowHosts with and without a port. Servers run on 127.0.0.1 only;
every address outside loopback is checked by the decision function, never contacted."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from nanobot.agent.tools.base import ToolContext, ToolError
from nanobot.agent.tools.netguard import host_allowed, is_public
from nanobot.agent.tools.web import WebFetchTool
from nanobot.config.schema import WebToolConfig
from tests.fakes.static_pages import trickle

CTX = ToolContext()

NOT_PUBLIC = [
    "127.0.0.1",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",
    "100.127.255.254",  # CGNAT/Tailscale
    "169.254.169.254",
    "0.0.0.0",
    "224.0.0.1",
    "240.0.0.1",
    "255.255.255.255",
    "192.0.0.1",
    "198.18.0.1",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fd7a:115c:a1e0::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:100.64.0.1",  # IPv4-mapped
    "2002:7f00:1::1",
    "2002:a9fe:a9fe::1",
    "2002:0a00:0001::",  # 6to4 of loopback, metadata, 10/8
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b:1::a00:1",  # NAT64 of loopback, metadata, 10/8
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo whose client is 127.0.0.1
    "::127.0.0.1",  # IPv4-compatible
]
PUBLIC = ["93.184.215.14", "8.8.8.8", "2606:4700:4700::1111", "2002:5db8:d70e::1", "64:ff9b::808:808"]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_non_global_addresses_are_refused(address: str) -> None:
    import ipaddress

    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_global_addresses_pass(address: str) -> None:
    import ipaddress

    assert is_public(ipaddress.ip_address(address))


def test_allow_hosts_entries() -> None:
    assert host_allowed("intranet", 8080, ["intranet"]) and host_allowed("intranet", 1, ["intranet"])
    assert host_allowed("intranet", 8080, ["intranet:8080"])
    assert not host_allowed("intranet", 8081, ["intranet:8080"])
    assert host_allowed("::1", 9000, ["[::1]:9000"]) and not host_allowed("::1", 9001, ["[::1]:9000"])
    assert host_allowed("::1", 9001, ["::1"])
    assert host_allowed("Intranet.", 80, ["INTRANET"])


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict[str, str], bytes, float]] = {}

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/host":
            body = (self.headers.get("Host") or "").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path == "/slow":
            trickle(1000, 0.2)(self)
            return
        if self.path.startswith("/redirect?"):
            self.send_response(302)
            self.send_header("Location", self.path.split("?", 1)[1])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"hello from the intranet"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[int]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


async def fetch(cfg: WebToolConfig, url: str) -> str:
    try:
        return await WebFetchTool(cfg).execute(CTX, url=url)
    except ToolError as exc:
        return f"ToolError: {exc}"


async def test_loopback_refused_unless_allowed_with_its_port(server: int) -> None:
    url = f"http://127.0.0.1:{server}/"
    assert "not a public address" in await fetch(WebToolConfig(), url)
    assert "not a public address" in await fetch(WebToolConfig(allow_hosts=[f"127.0.0.1:{server + 1}"]), url)
    assert "hello from the intranet" in await fetch(WebToolConfig(allow_hosts=[f"127.0.0.1:{server}"]), url)
    assert "hello from the intranet" in await fetch(WebToolConfig(allow_hosts=["127.0.0.1"]), url)


async def test_the_connection_goes_to_the_checked_address(
    server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the name is resolved once (by the check); the connection uses that answer,
    with the real name in the Host header. A second lookup would fail: the name does not exist."""
    lookups: list[str] = []
    real = asyncio.get_running_loop().getaddrinfo

    async def resolver(host, port, *args, **kwargs):  # noqa: ANN001, ANN202
        lookups.append(host)
        if host == "rebind.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        return await real(host, port, *args, **kwargs)

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", resolver)
    cfg = WebToolConfig(allow_hosts=[f"rebind.test:{server}"])
    out = await fetch(cfg, f"http://rebind.test:{server}/host")
    assert out.endswith(f"rebind.test:{server}") and lookups == ["rebind.test"]


async def test_an_international_domain_name_is_sent_in_its_ascii_form(
    server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bücher.test` went into the Host header as is: every fetch of such a name failed with a
    UnicodeEncodeError (and a traceback in the log)."""
    real = asyncio.get_running_loop().getaddrinfo
    lookups: list[str] = []

    async def resolver(host, port, *args, **kwargs):  # noqa: ANN001, ANN202
        lookups.append(host)
        if host in ("xn--bcher-kva.test", "xn--fa-hia.test"):
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
        return await real(host, port, *args, **kwargs)

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", resolver)
    cfg = WebToolConfig(allow_hosts=[f"bücher.test:{server}", f"faß.test:{server}"])  # as the user writes them
    out = await fetch(cfg, f"http://bücher.test:{server}/host")
    assert out.endswith(f"xn--bcher-kva.test:{server}"), out
    # `faß` was looked up as `fass` (another domain: the older IDNA rules) and sent as `xn--fa-hia`
    out = await fetch(cfg, f"http://faß.test:{server}/host")
    assert out.endswith(f"xn--fa-hia.test:{server}") and lookups == ["xn--bcher-kva.test", "xn--fa-hia.test"], (
        out, lookups)


async def test_allow_hosts_are_the_owners_only(server: int) -> None:
    """A group member or a guest (dmPolicy "open") read the service allowHosts opens for the owner
    (a home automation API on the LAN)."""
    cfg = WebToolConfig(allow_hosts=[f"127.0.0.1:{server}"])
    url = f"http://127.0.0.1:{server}/"
    group = ToolContext(channel="telegram", chat_id="-100", session_key="telegram:-100", sender_id="7", is_group=True)
    guest = ToolContext(channel="telegram", chat_id="8", session_key="telegram:8", sender_id="8", guest=True)
    for shared in (group, guest):
        with pytest.raises(ToolError, match="not a public address .only the owner's chats"):
            await WebFetchTool(cfg).execute(shared, url=url)
    assert "hello from the intranet" in await fetch(cfg, url)  # the owner's chats


async def test_rebinding_to_a_private_address_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def resolver(host, port, *args, **kwargs):  # noqa: ANN001, ANN202
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", port)),
        ]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", resolver)
    assert "169.254.169.254, which is not a public address" in await fetch(
        WebToolConfig(), "http://evil.test/"
    )


@pytest.mark.parametrize(
    "target",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:127.0.0.1]/",
        "http://100.64.0.1/",
        "http://10.0.0.1/",
    ],
)
async def test_redirect_into_the_private_network_is_refused(server: int, target: str) -> None:
    cfg = WebToolConfig(allow_hosts=[f"127.0.0.1:{server}"])
    out = await fetch(cfg, f"http://127.0.0.1:{server}/redirect?{target}")
    assert out.startswith("ToolError: refusing to fetch") and "not a public address" in out


async def test_redirect_to_another_loopback_port_is_refused(server: int) -> None:
    cfg = WebToolConfig(allow_hosts=[f"127.0.0.1:{server}"])
    out = await fetch(cfg, f"http://127.0.0.1:{server}/redirect?http://127.0.0.1:{server + 1}/")
    assert "not a public address" in out


async def test_timeout_is_a_total_deadline_for_a_slow_page(server: int) -> None:
    cfg = WebToolConfig(allow_hosts=[f"127.0.0.1:{server}"], timeout_s=1.0)
    started = time.monotonic()
    out = await fetch(cfg, f"http://127.0.0.1:{server}/slow")
    elapsed = time.monotonic() - started
    assert "did not finish within 1 s" in out
    assert elapsed < 2.5


async def test_non_http_schemes_are_refused() -> None:
    for url in ("file:///etc/passwd", "gopher://127.0.0.1/", "ftp://example.com/"):
        assert "only http(s) URLs" in await fetch(WebToolConfig(), url)
