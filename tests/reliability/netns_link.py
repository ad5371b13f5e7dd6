"""The bridge's own network namespace, joined to the host by a veth pair: a real link to break.

Only our own namespace and its veth pair are touched, with private addresses from 10.231.0.0/16;
packet loss is an nftables rule *inside* the namespace (``numgen random mod 100 < P drop``), so
nothing outside it is ever affected. Needs root, iproute2 and nftables.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess


def netns_unavailable_reason() -> str | None:
    """Why these tests cannot run here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root (ip netns, nftables)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"needs the {tool!r} command (Debian package {package})"
    return None


def _run(*args: str) -> None:
    result = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {result.stderr.strip()}")


class NetnsLink:
    """``with NetnsLink() as link: link.exec_prefix + [cmd...]`` runs cmd inside the namespace."""

    _made = itertools.count()  # links of this process so far: several may be up at once

    def __init__(self) -> None:
        index = next(NetnsLink._made)
        tag = f"{os.getpid() % 10000}x{index % 100}"
        self.name = f"airq-rel-{tag}"
        self.host_if, self.ns_if = f"aqh{tag}", f"aqd{tag}"  # interface names: at most 15 characters
        # A /30 of its own per link: the third octet from the process, the fourth from the link's index.
        octet, base = 20 + os.getpid() % 200, 4 * (index % 64)
        self.host_ip, self.ns_ip = f"10.231.{octet}.{base + 1}", f"10.231.{octet}.{base + 2}"

    @property
    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def setup(self) -> NetnsLink:
        _run("ip", "netns", "add", self.name)
        try:
            _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _run("ip", "link", "set", self.ns_if, "netns", self.name)
            _run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _run("ip", "link", "set", self.host_if, "up")
            _run(*self.exec_prefix, "ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
            _run(*self.exec_prefix, "ip", "link", "set", self.ns_if, "up")
            _run(*self.exec_prefix, "ip", "link", "set", "lo", "up")
        except BaseException:
            self.teardown()
            raise
        return self

    def set_loss(self, percent: int) -> None:
        """Drop ``percent`` % of the packets entering the namespace (replaces any previous rule);
        100 drops them all: a link gone silent, as when a Wi-Fi drops, with no FIN or RST."""
        drop = "counter drop" if percent >= 100 else f"numgen random mod 100 < {int(percent)} counter drop"
        ruleset = (
            "table inet airq_faults\n"
            "delete table inet airq_faults\n"
            "table inet airq_faults {\n"
            "  chain input {\n"
            "    type filter hook input priority 0; policy accept;\n"
            f"    {drop}\n"
            "  }\n"
            "}\n"
        )
        result = subprocess.run(
            [*self.exec_prefix, "nft", "-f", "-"], input=ruleset, capture_output=True, text=True, timeout=30
        )
        if result.returncode != 0:
            raise RuntimeError(f"nft failed in {self.name}: {result.stderr.strip()}")

    def dropped_packets(self) -> int:
        """Packets the loss rule has dropped so far (its nftables counter)."""
        result = subprocess.run(
            [*self.exec_prefix, "nft", "list", "table", "inet", "airq_faults"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        match = re.search(r"counter packets (\d+)", result.stdout)
        return int(match.group(1)) if match else 0

    def teardown(self) -> None:
        # Deleting the namespace destroys the veth pair (both ends) and the nftables rules in it.
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, timeout=30)

    def __enter__(self) -> NetnsLink:
        return self.setup()

    def __exit__(self, *exc: object) -> None:
        self.teardown()
