"""The driver's secret key, and the MAC of data with it: what only this checkout's driver can make.

A pull request's code runs in its cells as the same user as the driver. Whatever it writes into results/ or into a
cached tree must not be taken later as the driver's own: a record with the base's reuse key would be reused as the
base's outcome (plan/reuse.py), a tree it edited would run in the next command's cells (plan/tree_seal.py). So every
record line and every cached tree's manifest carries an HMAC-SHA256 made with a key that only the driver reads:
32 random bytes in .cache/secrets/record-mac.key, created 0600 in a 0700 directory of its own (a sandbox hides that
directory from the cells: it is never under a run directory, never in a rank's environment, never on a command line).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from harness.paths import CACHE_DIR

KEY_DIR_NAME = "secrets"
KEY_FILE_NAME = "record-mac.key"
MAC_FIELD = "mac"  # a record line's field that holds its MAC (records/store.py writes it, plan/reuse.py checks it)
_KEY_BYTES = 32
_keys: dict[Path, bytes] = {}  # read once per process (per cache directory: a test points it elsewhere)


def key_file(cache_dir: Path | None = None) -> Path:
    return Path(cache_dir or CACHE_DIR) / KEY_DIR_NAME / KEY_FILE_NAME


def driver_key(cache_dir: Path | None = None) -> bytes:
    """This checkout's key, made on first use (O_EXCL: two commands starting together agree on one)."""
    path = key_file(cache_dir)
    if path in _keys:
        return _keys[path]
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = _read_key(path)
    else:
        key = secrets.token_bytes(_KEY_BYTES)
        with os.fdopen(fd, "wb") as out:
            out.write(key)
            out.flush()
            os.fsync(out.fileno())
    _keys[path] = key
    return key


def _read_key(path: Path) -> bytes:
    # A key being written by another command at this moment: its 32 bytes are there within a moment.
    for _ in range(100):
        key = path.read_bytes()
        if len(key) == _KEY_BYTES:
            return key
        os.sched_yield()
    raise OSError(f"{path}: not a key of {_KEY_BYTES} bytes ({len(key)}); remove it to make a new one")


def canonical(data) -> bytes:
    """data as JSON the same way every time: keys sorted, ASCII, no spaces. Made from data as its JSON reads back
    (a key that is no string sorts as the string it becomes), so a record's line, read again, gives the same bytes."""
    plain = json.loads(json.dumps(data, sort_keys=True, default=str))
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def mac(message: bytes, cache_dir: Path | None = None) -> str:
    return hmac.new(driver_key(cache_dir), message, hashlib.sha256).hexdigest()


def verifies(message: bytes, claimed, cache_dir: Path | None = None) -> bool:
    return isinstance(claimed, str) and hmac.compare_digest(mac(message, cache_dir), claimed)


def signed_record(data: dict) -> dict:
    """A record's JSON with its MAC (over the canonical JSON of everything else in it) in MAC_FIELD."""
    rest = {k: v for k, v in data.items() if k != MAC_FIELD}
    return {**rest, MAC_FIELD: mac(canonical(rest))}


def record_state(data: dict) -> str:
    """'signed' (its MAC verifies: written by this checkout's driver), 'unsigned' (no MAC: a record from before
    records were signed, or from elsewhere) or 'forged' (a MAC that does not verify: edited, or not made here)."""
    if MAC_FIELD not in data:
        return "unsigned"
    rest = {k: v for k, v in data.items() if k != MAC_FIELD}
    return "signed" if verifies(canonical(rest), data[MAC_FIELD]) else "forged"
