"""Which hosts an agent may reach: its egress allow-list, and how a request is judged.

An entry names a host the way sandbox-runtime's ``allowedDomains`` do, plus an optional port:

* ``api.example.com`` — exactly that host, any port;
* ``*.example.com`` — any name below ``example.com`` (not ``example.com`` itself);
* ``fake.test:8080``, ``*.example.com:443`` — only that port;
* ``10.1.2.3``, ``[fd00::5]:8080``, ``::1`` — an address, reached only when written as one.

Names compare case-insensitively, without a trailing dot. A request for a raw address
matches only an entry that is that address: a name never stands for the addresses it
resolves to. Where a name resolves to an address that is not public (loopback, private,
link-local, unspecified, multicast, reserved: :func:`is_public`), only an entry that
names the host exactly (no wildcard) lets it through: a wildcard cannot be turned into a
way to the host's own services by whoever controls a subdomain's DNS.

Pure and standard library only: the proxy process imports it.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

#: The loopback port inside the sandbox's namespace that the bridge serves.
PROXY_PORT = 3128
#: Where the directory holding the proxy's socket for this sandbox is bound inside it.
SANDBOX_DIR = "/run/tether-egress"
#: The proxy's socket in that directory (and in ``<home>/egress/<key>/`` on the host).
SOCKET_NAME = "proxy.sock"
#: At most this many entries in one policy (and in each of its sources).
MAX_ENTRIES = 256
MAX_HOST = 253

#: The API (and sign-in) hosts of each model provider, as their CLIs use them.
PROVIDER_HOSTS: dict[str, tuple[str, ...]] = {
    # Claude Code: the API (also its OAuth token refresh), the sign-in pages.
    "anthropic": ("api.anthropic.com", "claude.ai", "platform.claude.com",
                  "console.anthropic.com"),
    # Codex: the API; ChatGPT sign-in (its backend-api) and the token refresh.
    "openai": ("api.openai.com", "chatgpt.com", "auth.openai.com"),
    # Gemini CLI: the Gemini API, Code Assist (Google sign-in), the token refresh, Vertex.
    "google": ("generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com",
               "oauth2.googleapis.com", "aiplatform.googleapis.com"),
}
#: Which providers' hosts an agent provider gets by default; any other (generic, aider,
#: a provider file) gets all of them: it may call any model.
AGENT_PROVIDERS: dict[str, tuple[str, ...]] = {
    "claude": ("anthropic",), "codex": ("openai",), "gemini": ("google",),
}

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_NAME = re.compile(rf"(?:\*\.)?{_LABEL}(?:\.{_LABEL})*")
_PORT = re.compile(r"[0-9]{1,5}")


class BadEntry(ValueError):
    """An allow-list entry that is not a host pattern; the message says what is."""


@dataclass(frozen=True)
class Entry:
    """One allow-list entry, normalised: ``host`` lower-case without a trailing dot
    (``*.`` stripped for a wildcard; an address in its compressed form), ``port`` or None
    for any."""

    host: str
    port: int | None = None
    wildcard: bool = False
    address: bool = False

    def __str__(self) -> str:
        host = f"*.{self.host}" if self.wildcard else self.host
        if self.port is None:
            return host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    def matches(self, host: str, port: int) -> bool:
        """``host`` as :func:`normalise_host` returns it."""
        if self.port is not None and port != self.port:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


def _address(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def is_address(text: str) -> bool:
    """Whether ``text`` is an IPv4 or IPv6 address (not a name)."""
    return _address(text) is not None


def normalise_host(text: str) -> str:
    """A request's host as entries are compared with it: lower-case, no trailing dot,
    an address compressed (``[::1]`` → ``::1``). Raises :class:`BadEntry` for anything
    that is neither a host name nor an address."""
    host = text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if (addr := _address(host)) is not None:
        return addr
    host = host.lower().removesuffix(".")
    if len(host) > MAX_HOST or not _NAME.fullmatch(host) or host.startswith("*."):
        raise BadEntry(f"{text[:80]!r} is not a host name")
    return host


def parse_entry(text: str) -> Entry:
    """An entry from its text; raises :class:`BadEntry` saying what is wrong."""
    raw = text.strip()
    if not raw:
        raise BadEntry("an empty entry; write a host name like api.example.com")
    if "://" in raw or "/" in raw:
        shown = raw.partition("://")[2].partition("/")[0] if "://" in raw else raw
        raise BadEntry(f"{raw!r} is not a host pattern: write the host alone, without a "
                       f"scheme or path ({shown or 'api.example.com'})")
    host, port = raw, None
    if raw.startswith("["):  # [v6] or [v6]:port
        close = raw.find("]")
        host, rest = raw[1:close] if close > 0 else raw, raw[close + 1:] if close > 0 else ""
        if close < 0 or (rest and not rest.startswith(":")):
            raise BadEntry(f"{raw!r}: write an IPv6 address as [ADDRESS] or [ADDRESS]:PORT")
        port = rest[1:] if rest else None
    elif raw.count(":") == 1:
        host, port = raw.split(":")
    addr = _address(host)
    if port is not None and (not _PORT.fullmatch(port) or not 0 < int(port) < 65536):
        raise BadEntry(f"{raw!r}: the port must be a number from 1 to 65535")
    number = int(port) if port is not None else None
    if addr is not None:
        return Entry(addr, number, address=True)
    name = host.lower().removesuffix(".")
    wildcard = name.startswith("*.")
    if len(name) > MAX_HOST or not _NAME.fullmatch(name) or "*" in name[2:]:
        raise BadEntry(f"{raw!r} is not a host pattern: write a host name (api.example.com), "
                       "a wildcard for the names below a domain (*.example.com), or an "
                       "address, each optionally with :PORT")
    return Entry(name[2:] if wildcard else name, number, wildcard=wildcard)


def network_mode(network: object, *, agent: bool) -> str:
    """What a bwrap sandbox's ``network`` (``None``, ``"none"``, ``"private"``, ``"host"``
    or an allow-list mapping) gives an exec: ``"host"`` (the host's network), ``"none"``
    (a namespace of its own with only loopback) or, for an agent, ``"proxy"`` (that,
    plus the bridge to the egress proxy). A plain exec never goes through the proxy."""
    if network == "host":
        return "host"
    if network in ("none", "private") or not agent:
        return "none"
    return "proxy"


def default_allow(provider: str) -> tuple[str, ...]:
    """The hosts an agent of ``provider`` may reach without being told."""
    names = AGENT_PROVIDERS.get(provider, tuple(PROVIDER_HOSTS))
    return tuple(h for n in names for h in PROVIDER_HOSTS[n])


def is_public(address: str) -> bool:
    """Whether an address is on the public internet: not loopback, private, link-local,
    carrier-grade NAT, unspecified (``0.0.0.0`` reaches the host itself), multicast or
    reserved; an IPv4-mapped IPv6 address is judged as the IPv4 one."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


@dataclass(frozen=True)
class Policy:
    """An allow-list; :meth:`match` judges a request's host and port."""

    entries: tuple[Entry, ...] = ()

    @classmethod
    def parse(cls, texts: list[str] | tuple[str, ...]) -> Policy:
        found: list[Entry] = []
        for t in texts:
            e = parse_entry(t)
            if e not in found:
                found.append(e)
        if len(found) > MAX_ENTRIES:
            raise BadEntry(f"{len(found)} entries; at most {MAX_ENTRIES}")
        return cls(tuple(found))

    def texts(self) -> list[str]:
        return [str(e) for e in self.entries]

    def match(self, host: str, port: int) -> Entry | None:
        """The entry that allows ``host`` (normalised) and ``port``, an exact one first
        (it may reach a non-public address, a wildcard may not); None: denied."""
        is_addr = is_address(host)
        best: Entry | None = None
        for e in self.entries:
            if e.address != is_addr or not e.matches(host, port):
                continue
            if not e.wildcard:
                return e
            best = best or e
        return best


def compose(*sources: list[str] | tuple[str, ...]) -> list[str]:
    """The entries of several sources (provider defaults, the sandbox's, the lineage's),
    each once, in order, as their normalised text. Raises :class:`BadEntry`."""
    return Policy.parse([t for s in sources for t in s]).texts()


def proxy_env(port: int = PROXY_PORT) -> dict[str, str]:
    """What tells the programs in the sandbox to use the proxy: the standard variables,
    both cases (curl reads only ``http_proxy`` in lower case), ``NO_PROXY`` for the
    sandbox's own loopback (its own servers), and Node's switch to honour them (Node 24+
    reads the variables for ``fetch``/``http`` only with ``NODE_USE_ENV_PROXY=1``)."""
    url = f"http://127.0.0.1:{port}"
    no_proxy = "localhost,127.0.0.1,::1"
    env = {"NODE_USE_ENV_PROXY": "1"}
    for name, value in (("HTTPS_PROXY", url), ("HTTP_PROXY", url), ("NO_PROXY", no_proxy)):
        env[name] = value
        env[name.lower()] = value
    return env
