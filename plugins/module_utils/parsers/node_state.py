# -*- coding: utf-8 -*-
# Copyright: hybridgpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's own state read from its tools' plain output: active service units, dpkg package
status and nftables tables. Onboarding's baseline (standalone_state), removal's checks
(node_removal_check) and its restore step all read the node through these, so they agree on
what counts as running, installed or present."""

from __future__ import annotations

import re

# Run with LANG=C: the parsers read the tools' English, column-separated output.
LIST_ACTIVE_UNITS = ["systemctl", "list-units", "--type=service", "--state=active", "--no-legend", "--plain"]
LIST_NFT_TABLES = ["nft", "list", "tables"]
# One line per package; dpkg-query prints nothing for a package it has never heard of.
DPKG_QUERY_FORMAT = "${Package} ${db:Status-Abbrev} ${Version}\n"

# A Debian package name (policy 5.6.1): lower case letters, digits, + - . ; two or more, starting
# with a letter or digit. No version, no option: safe to pass to apt-get and dpkg-query.
PACKAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")

# The second letter of dpkg's status abbreviation (see dpkg-query(1)).
_CONFIGURED = frozenset("iWt")  # installed; W/t: installed, triggers still to run
_ABSENT = frozenset("nc")       # not installed, or only configuration files left


def active_units(text):
    """Unit names from ``systemctl list-units --no-legend --plain`` output."""
    return [line.split()[0] for line in text.splitlines() if line.split()]


def nft_tables(text):
    """[(family, name)] from ``nft list tables`` or the table lines of ``nft list ruleset``."""
    tables = []
    for line in text.splitlines():
        parts = line.replace("{", " ").split()
        if len(parts) == 3 and parts[0] == "table" and (parts[1], parts[2]) not in tables:
            tables.append((parts[1], parts[2]))
    return tables


def dpkg_status(text):
    """{package: (status abbreviation, version)} from dpkg-query lines in DPKG_QUERY_FORMAT.

    The architecture qualifier (``libfoo:amd64``) is dropped. Abbreviation: desired action
    (u, i, h, r, p), status (n, c, H, U, F, W, t, i), and R when reinstallation is required.
    """
    found = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            found[fields[0].split(":")[0]] = (fields[1], fields[2] if len(fields) >= 3 else None)
    return found


def configured(abbrev):
    """Installed and configured, whatever the desired action (held, or marked for removal)."""
    return len(abbrev) >= 2 and abbrev[1] in _CONFIGURED


def present(abbrev):
    """Any of the package's files are on the node (installed, or half-way in or out)."""
    return len(abbrev) >= 2 and abbrev[1] not in _ABSENT


def installed_versions(text, wanted):
    """{package: installed version or None} for each wanted package."""
    status = dpkg_status(text)
    result = {}
    for name in wanted:
        abbrev, version = status.get(name, ("", None))
        result[name] = version if configured(abbrev) else None
    return result
