"""Salted, chained hashes of a prompt's token blocks, and the salt they are keyed with.

Block i's hash covers block i's token ids and the hash of block i-1, so two prompts share
block i's hash exactly when they share every token up to the end of block i: what a prefix cache
can reuse. Only full blocks are hashed (vLLM caches only full blocks; a partial tail is unique
to its request anyway). blake2b keyed with the salt: without the salt nobody can test a guessed
prompt against a captured trace, while hashes stay comparable across captures that share it.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from array import array
from collections.abc import Sequence
from pathlib import Path

from autotune.errors import ConfigError, SettingError

SALT_FILE_NAME = "salt"
_SALT_BYTES = 32
_PERSON = b"autotune-cap-v1"  # domain separation: these hashes mean nothing elsewhere


def block_hashes(token_ids: Sequence[int], key: bytes, block_tokens: int) -> tuple[int, ...]:
    """Signed 64-bit hashes (what a trace's `hash_ids` hold) of each full block."""
    hashes: list[int] = []
    previous = b""
    for start in range(0, len(token_ids) - block_tokens + 1, block_tokens):
        h = hashlib.blake2b(previous, key=key, digest_size=8, person=_PERSON)
        h.update(array("I", token_ids[start:start + block_tokens]).tobytes())
        previous = h.digest()
        hashes.append(int.from_bytes(previous, "little", signed=True))
    return tuple(hashes)


def hash_key(salt: bytes) -> bytes:
    """The blake2b key for a salt of any length (blake2b keys are at most 64 bytes)."""
    return hashlib.blake2b(salt, digest_size=32, person=_PERSON).digest()


def load_or_create_salt(out_dir: Path, salt_file: Path | None) -> tuple[bytes, Path]:
    """The salt, from `salt_file` if given, else from OUT_DIR/salt, created (mode 0600) with
    random bytes if absent: later captures into the same directory reuse it, so their hashes
    stay comparable. Returns the salt and where it came from."""
    path = salt_file if salt_file is not None else out_dir / SALT_FILE_NAME
    if salt_file is None and not path.exists():
        try:  # O_EXCL: never overwrite a salt another process just wrote
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        except OSError as exc:
            raise SettingError("cannot create the salt file {path}: {why}; give a writable "
                               "{out_dir} directory or {salt_file}", path=path,
                               why=exc.strerror) from None
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(_SALT_BYTES) + "\n")
    try:
        salt = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the salt file {path}: {exc.strerror}") from None
    if not salt:
        raise SettingError("the salt file {path} is empty; put a secret in it (e.g. "
                           "`openssl rand -hex 32`) or leave {salt_file} out to generate one",
                           path=path)
    return salt, path
