"""Stepwise session names for the ids frameworks choose.

A session name follows the server's rule: 1-64 of ``[A-Za-z0-9._-]``, no ``..``, not a
reserved word or device name. An id that already is one is used as it is; any other id maps to
``<prefix>-<readable part>-<first 16 hex digits of the SHA-256 of its UTF-8>``, where the
readable part keeps up to 40 of its letters, digits, ``_`` and ``-`` (other runs become ``-``).
"""

from __future__ import annotations

import hashlib
import re

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_DEVICE = re.compile(r"^(CON|PRN|AUX|NUL|COM[1-9]|LPT[1-9])$")


def valid_session_name(name: str) -> bool:
    """Whether ``name`` is a valid Stepwise session name as it is."""
    if not _NAME.match(name) or ".." in name:
        return False
    if name.lower() in {"index", "metadata", "."}:
        return False
    return not _DEVICE.match(name.split(".", 1)[0].upper())


def session_name_for(key: str, prefix: str) -> str:
    """The Stepwise session name ``key`` maps to (see the module's docs)."""
    if valid_session_name(key):
        return key
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    readable = re.sub(r"[^A-Za-z0-9_-]+", "-", key).strip("-_")[:40].strip("-_")
    return f"{prefix}-{readable}-{digest}" if readable else f"{prefix}-{digest}"
