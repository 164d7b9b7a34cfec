"""Reading a secret from a file of the user's own, as ssh reads a private key: a regular
file (not a symlink, FIFO or device) owned by us (or root) that neither the group nor
others may read or write. Its first line, without surrounding whitespace, is the secret:
a file written by ``echo`` or an editor ends in a newline that is not part of it."""

from __future__ import annotations

import os
import stat

MAX_BYTES = 64 * 1024


class SecretFileError(Exception):
    """The file cannot hold a secret; the message says why and how to fix it."""


def read_secret_line(path: str, what: str) -> str:
    """The secret in ``path`` (``what`` names it in messages)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise SecretFileError(f"cannot read {what} from {path}: {e.strerror} (it must be a "
                              "regular file, not a symlink)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SecretFileError(f"{path} is not a regular file; put {what} in one")
        if st.st_uid not in (os.geteuid(), 0):
            raise SecretFileError(f"{path} is not yours; keep {what} in a file of your own")
        if st.st_mode & 0o077:
            raise SecretFileError(f"{path} can be read or written by others (mode "
                                  f"{stat.S_IMODE(st.st_mode):o}); run `chmod 600 {path}`")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise SecretFileError(f"{path} is larger than {MAX_BYTES} bytes: not {what}")
    line = data.decode(errors="replace").strip().splitlines()
    if not line or not line[0].strip():
        raise SecretFileError(f"{path} is empty: write {what} on its first line")
    return line[0].strip()
