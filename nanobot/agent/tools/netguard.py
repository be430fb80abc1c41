"""Address decisions for web_fetch: which hosts and addresses a fetch may reach (SSRF guard).

Only global unicast addresses are reachable, checked through every IPv6 form that embeds an IPv4
address (IPv4-mapped and -compatible, 6to4, Teredo, NAT64), unless the host is listed in
`tools.web.allowHosts` as `host` (any port) or `host:port` (that port only; IPv6 as `[::1]:8080`).
The host is resolved once here, and the caller connects to the address that was checked, so a DNS
answer that changes between check and connect (rebinding) cannot redirect the request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_COMPAT = ipaddress.ip_network("::/96")


class AddressRefused(Exception):
    """The URL's host may not be fetched; the message says why and how to allow it."""


def embedded_ipv4(addr: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries (and that a gateway may route to)."""
    found = []
    if addr.ipv4_mapped is not None:
        found.append(addr.ipv4_mapped)
    if addr in _SIX_TO_FOUR:
        found.append(ipaddress.IPv4Address((int(addr) >> 80) & 0xFFFFFFFF))
    if addr.teredo is not None:
        found.extend(addr.teredo)
    if any(addr in net for net in _NAT64) or (addr in _COMPAT and int(addr) > 0xFFFF):
        found.append(ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF))
    return found


def is_public(addr: IPAddress) -> bool:
    """A global unicast address, also in every embedded IPv4 form."""
    if isinstance(addr, ipaddress.IPv6Address) and addr in _NAT64[0]:
        # DNS64 networks answer every IPv4-only site this way: judge the IPv4 address inside
        return is_public(ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF))
    if isinstance(addr, ipaddress.IPv6Address) and (addr in _NAT64[1] or addr.is_site_local):
        # 64:ff9b:1::/48 is for local translators (RFC 8215; its IPv4 address need not sit in the
        # last 32 bits), fec0::/10 the deprecated site-local range: neither is a global address
        return False
    bad = addr.is_multicast or addr.is_unspecified or addr.is_loopback or addr.is_link_local
    if bad or addr.is_reserved or addr.is_private or not addr.is_global:
        return False
    if isinstance(addr, ipaddress.IPv6Address):
        return all(is_public(v4) for v4 in embedded_ipv4(addr))
    return True


@dataclass(frozen=True)
class AllowEntry:
    host: str
    port: int | None  # None: any port


def parse_allow_entry(raw: str) -> AllowEntry:
    """`host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address (any port)."""
    text = raw.strip().lower().rstrip(".")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
        return AllowEntry(host, int(port) if port else None)
    if text.count(":") == 1:
        host, port = text.split(":")
        return AllowEntry(host, int(port) if port.isdigit() else None)
    return AllowEntry(text, None)


def host_allowed(host: str, port: int, allow_hosts: list[str]) -> bool:
    host = host.lower().rstrip(".").strip("[]")
    for raw in allow_hosts:
        try:
            entry = parse_allow_entry(raw)
        except ValueError:
            continue
        if entry.host == host and (entry.port is None or entry.port == port):
            return True
    return False


async def resolve_checked(host: str, port: int, allow_hosts: list[str], *, shared: bool = False) -> str:
    """The one address to connect to for host:port, after the checks (raises AddressRefused);
    `shared`: for a group or a guest, whom allowHosts does not open such addresses to."""
    allowed = host_allowed(host, port, allow_hosts)
    bare = host.strip("[]")
    try:
        literal: IPAddress | None = ipaddress.ip_address(bare)
    except ValueError:
        literal = None
    if literal is not None:
        addresses: list[IPAddress] = [literal]
    else:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(bare, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise AddressRefused(f"cannot resolve host {bare}: {exc.strerror}") from None
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        if not addresses:
            raise AddressRefused(f"cannot resolve host {bare}")
    if not allowed:
        for addr in addresses:
            if not is_public(addr):
                how = (
                    "only the owner's chats may reach such addresses"
                    if shared
                    else f"add '{host_entry(bare, port)}' to tools.web.allowHosts to allow it"
                )
                raise AddressRefused(
                    f"refusing to fetch {bare}: it resolves to {addr}, which is not a public address ({how})"
                )
    return str(addresses[0])


def host_entry(host: str, port: int) -> str:
    """An allowHosts entry for `host:port`: an IPv6 address in brackets (`[::1]:8080`)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
