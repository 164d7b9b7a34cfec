"""The daemon's log lines: text for people (the default), JSON lines for collectors
(``--log-format json``, ``TETHER_LOG_FORMAT=json``).

Log calls name what they are about with ``extra=ids(exec=…, sandbox=…, lineage=…)``;
the JSON formatter puts those ids in fields of their own, so a collector can filter by
exec, sandbox or lineage without parsing messages.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

FORMATS = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def ids(*, exec: str | None = None, sandbox: str | None = None,
        lineage: str | None = None) -> dict[str, Any]:
    """``extra=`` for a log call about an exec, a sandbox or a lineage."""
    return {"tether_ids": {k: v for k, v in (("exec", exec), ("sandbox", sandbox),
                                              ("lineage", lineage)) if v is not None}}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (Unix, float), level, logger, message, the ids,
    and the traceback (``exc``) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"time": round(record.created, 6), "level": record.levelname,
                                "logger": record.name, "msg": record.getMessage()}
        line.update(getattr(record, "tether_ids", None) or {})
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(level: str, fmt: str) -> None:
    """Set up the root logger on stderr in the given format (``FORMATS``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
