"""Lakegate's HDFS-style, tamper-evident audit log (contract: spec/audit-format.md v1).

``AuditLog.write`` records one statement's events before its result is returned and raises
``AuditWriteError`` when it cannot (the caller then refuses the access: fail closed).
"""

from audit.log import AuditEvent, AuditLog, AuditWriteError, statement_hash

__all__ = ["AuditEvent", "AuditLog", "AuditWriteError", "statement_hash"]
