"""The directory: users and groups the organisation's identity provider pushes (SCIM,
api/scim.py) or a sync reads (LDAP), in the catalog's database (issue 37).

Every server answers `groups_of` and `deprovisioned` (api/authenticator.py's
`DirectoryView`) on each authentication, so they come from an in-process snapshot, not a
query: the snapshot is re-read when the `directory` generation row moved, and that row is
read at most once every `max_age` seconds (default 2). A write through this process's store
is seen at once; servers sharing one PostgreSQL catalog (or one SQLite file) see each
other's writes within `max_age` seconds of the commit, plus the time one reload takes
(about 0.6 s for 10,000 users in 500 groups of 200 on SQLite; other threads answer from
the previous snapshot meanwhile, never waiting). That is the documented bound for a
deactivated user to be refused everywhere.

Groups belong to a source: `scim` (one group at a time, by the SCIM service) or any other
name (`ldap`) whose whole snapshot `replace_source_groups` replaces atomically. Users are
SCIM's. A deleted SCIM user stays as a tombstone (not listed, not found), so `deprovisioned`
stays true and a still-valid token of that user keeps being refused; a user created again
with that name replaces its tombstone. Renaming a user leaves a tombstone for the old name.

User names here are canonical already (governance.identity.canonical_user, applied by the
callers: this layer may not import governance). Provider group names are mapped to policy
groups by the callable given for their source (a GroupMapping's `apply`); a source without
one contributes no groups (fail closed).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, and_, delete, insert, select, update

from catalog import schema as db
from catalog.store import SqlStore

log = logging.getLogger("lakegate.directory")

SCIM = "scim"
MAX_AGE = 2.0  # seconds a snapshot is used before the generation row is read again
_U, _G, _M = db.directory_users, db.directory_groups, db.directory_members
Mapper = Callable[[Iterable[str]], frozenset[str]]


class DirectoryError(ValueError):
    """A directory change that cannot be made (the message is one line for the caller)."""


class DirectoryConflict(DirectoryError):
    """The user name (or a source's group name) is taken."""


class DirectoryNotFound(DirectoryError):
    """No live user or group has this id."""


class DirectoryStale(DirectoryError):
    """The resource changed since the version the caller read (If-Match)."""


@dataclass(frozen=True)
class DirectoryUser:
    """A SCIM user as stored; `version` moves on each change (the ETag)."""

    id: str
    user_name: str
    external_id: str | None
    display_name: str | None
    emails: tuple[Mapping[str, Any], ...]
    active: bool
    created: float
    last_modified: float
    version: int
    attributes: Mapping[str, Any] = field(default_factory=dict)  # the rest, as sent (JSON)


@dataclass(frozen=True)
class DirectoryGroup:
    """A group of one source; `members` are (user id, user name) pairs."""

    id: str
    source: str
    display_name: str
    external_id: str | None
    members: tuple[tuple[str, str], ...]
    created: float
    last_modified: float
    version: int


@dataclass(frozen=True)
class _Snapshot:
    generation: int
    read_at: float
    gone: frozenset[str] = frozenset()  # deactivated or deleted user names
    groups: Mapping[str, frozenset[str]] = field(default_factory=dict)  # mapped policy groups


class DirectoryStore:
    """The directory tables of one catalog database, and this process's snapshot of them."""

    def __init__(
        self,
        store: SqlStore,
        mappings: Mapping[str, Mapper],
        *,
        max_age: float = MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.mappings = dict(mappings)
        self.max_age = max_age
        self.clock = clock
        self._snapshot: _Snapshot | None = None
        self._lock = threading.Lock()
        self._subscribers: list[Callable[[str], None]] = []

    # DirectoryView ------------------------------------------------------------------------

    def groups_of(self, user: str) -> frozenset[str]:
        return self._current().groups.get(user, frozenset())

    def deprovisioned(self, user: str) -> bool:
        return user in self._current().gone

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """`callback(user)` for each user a refresh finds newly deactivated or deleted (the
        gateway ends its sessions, the REST server forgets remembered tokens)."""
        self._subscribers.append(callback)

    def refresh(self, *, force: bool = False) -> None:
        """Re-read the generation row (and the directory when it moved) now."""
        self._current(force=True, reload=force)

    def watch(self, every: float | None = None) -> Callable[[], None]:
        """Refresh in a background thread every `every` seconds (default `max_age`), so a
        process with no authentication going on still notices deprovisioning; returns the
        function that stops it."""
        done = threading.Event()

        def run() -> None:
            while not done.wait(every or self.max_age):
                try:
                    self.refresh()
                except Exception:  # the next round, or the next authentication, tries again
                    continue

        threading.Thread(target=run, name="lakegate-directory", daemon=True).start()
        return done.set

    def _current(self, *, force: bool = False, reload: bool = False) -> _Snapshot:
        snap = self._snapshot
        now = self.clock()
        if snap is not None and not force and now - snap.read_at < self.max_age:
            return snap
        # one thread refreshes; the others answer from the snapshot they have meanwhile (a
        # reload of a large directory takes a while), unless they wrote or were told to
        if not self._lock.acquire(blocking=snap is None or force):
            return snap  # type: ignore[return-value]  # (snap is set: acquire blocked else)
        try:
            snap = self._snapshot
            if snap is not None and not force and now - snap.read_at < self.max_age:
                return snap
            with self.store.read() as conn:
                generation = self._generation(conn)
                if snap is not None and snap.generation == generation and not reload:
                    fresh = _Snapshot(generation, now, snap.gone, snap.groups)
                else:
                    fresh = self._load(conn, generation, now)
            self._snapshot = fresh
        finally:
            self._lock.release()
        if snap is not None:
            for user in sorted(fresh.gone - snap.gone):
                for callback in list(self._subscribers):
                    try:
                        callback(user)
                    except Exception as e:  # one subscriber's failure stops no other
                        log.error("deprovisioning of %s not handled: %s", user, e)
        return fresh

    @staticmethod
    def _generation(conn: Connection) -> int:
        row = conn.execute(select(db.meta.c.value).where(db.meta.c.key == "directory")).first()
        return int(row[0]) if row else 0

    def _load(self, conn: Connection, generation: int, now: float) -> _Snapshot:
        gone = frozenset(
            r.user_name
            for r in conn.execute(
                select(_U.c.user_name).where((_U.c.active == 0) | (_U.c.deleted == 1))
            )
        )
        names: dict[str, dict[str, set[str]]] = {}  # user -> source -> provider group names
        rows = conn.execute(
            select(
                _G.c.source, _G.c.display_name, _U.c.user_name, _M.c.user_name.label("named")
            ).select_from(
                _M.join(_G, _G.c.id == _M.c.group_id).outerjoin(_U, _U.c.id == _M.c.user_id)
            )
        )
        for source, group, by_id, by_name in rows:
            user = by_id or by_name
            if user:
                names.setdefault(user, {}).setdefault(source, set()).add(group)
        groups: dict[str, frozenset[str]] = {}
        for user, by_source in names.items():
            mapped: frozenset[str] = frozenset()
            for source, provider_names in by_source.items():
                mapper = self.mappings.get(source)
                if mapper is not None:
                    mapped |= mapper(sorted(provider_names))
            if mapped:
                groups[user] = mapped
        return _Snapshot(generation, now, gone, groups)

    # writing ------------------------------------------------------------------------------

    def _write(self, change: Callable[[Connection], Any]) -> Any:
        """One transaction that moves the directory generation; this process's snapshot is
        re-read right after, so its own server sees the change at once."""
        with self.store.write(bump=False) as conn:
            result = change(conn)
            conn.execute(
                update(db.meta)
                .where(db.meta.c.key == "directory")
                .values(value=db.meta.c.value + 1)
            )
        self._current(force=True)
        return result

    # SCIM users ---------------------------------------------------------------------------

    @staticmethod
    def _user(row: Any) -> DirectoryUser:
        return DirectoryUser(
            id=row.id,
            user_name=row.user_name,
            external_id=row.external_id,
            display_name=row.display_name,
            emails=tuple(json.loads(row.emails)),
            active=bool(row.active),
            created=row.created,
            last_modified=row.last_modified,
            version=row.version,
            attributes=json.loads(row.attributes),
        )

    def get_user(self, user_id: str) -> DirectoryUser | None:
        with self.store.read() as conn:
            row = conn.execute(select(_U).where(_U.c.id == user_id, _U.c.deleted == 0)).first()
        return self._user(row) if row else None

    def find_user(self, user_name: str) -> DirectoryUser | None:
        with self.store.read() as conn:
            row = conn.execute(
                select(_U).where(_U.c.user_name == user_name, _U.c.deleted == 0)
            ).first()
        return self._user(row) if row else None

    def list_users(self) -> list[DirectoryUser]:
        """Every live user, oldest first (a stable order for SCIM's paging)."""
        with self.store.read() as conn:
            rows = conn.execute(select(_U).where(_U.c.deleted == 0).order_by(_U.c.created, _U.c.id))
            return [self._user(r) for r in rows]

    def create_user(
        self,
        user_name: str,
        *,
        external_id: str | None = None,
        display_name: str | None = None,
        emails: Iterable[Mapping[str, Any]] = (),
        active: bool = True,
        attributes: Mapping[str, Any] | None = None,
    ) -> DirectoryUser:
        """A new user; DirectoryConflict when a live user has the name (a tombstone of it
        is replaced). `attributes`: whatever else the provider keeps on it (JSON), given
        back as it was."""
        now = time.time()
        row = {
            "id": str(uuid.uuid4()),
            "user_name": user_name,
            "external_id": external_id,
            "display_name": display_name,
            "emails": json.dumps(list(emails)),
            "attributes": json.dumps(dict(attributes or {})),
            "active": int(active),
            "deleted": 0,
            "created": now,
            "last_modified": now,
            "version": 1,
        }

        def change(conn: Connection) -> None:
            self._claim_name(conn, user_name, None)
            conn.execute(insert(_U).values(**row))

        self._write(change)
        return self._user(SimpleNamespace(**row))

    def _claim_name(self, conn: Connection, user_name: str, owner: str | None) -> None:
        """Make `user_name` free for the user `owner` (None: a new one): a tombstone of it
        goes, a live user of it other than `owner` is a conflict."""
        held = conn.execute(
            select(_U.c.id, _U.c.deleted).where(_U.c.user_name == user_name)
        ).first()
        if held is None or held.id == owner:
            return
        if not held.deleted:
            raise DirectoryConflict(f"a user named {user_name} exists already")
        conn.execute(delete(_U).where(_U.c.id == held.id))

    def replace_user(
        self,
        user_id: str,
        *,
        user_name: str,
        external_id: str | None,
        display_name: str | None,
        emails: Iterable[Mapping[str, Any]],
        active: bool,
        attributes: Mapping[str, Any] | None = None,
        if_version: int | None = None,
    ) -> DirectoryUser:
        """Every attribute of a live user at once (SCIM PUT, and PATCH after applying)."""
        emails_json = json.dumps(list(emails))
        attributes_json = json.dumps(dict(attributes or {}))

        def change(conn: Connection) -> DirectoryUser:
            old = self._live_user(conn, user_id, if_version)
            now = time.time()
            if user_name != old.user_name:
                self._claim_name(conn, user_name, user_id)
            values = {
                "user_name": user_name,
                "external_id": external_id,
                "display_name": display_name,
                "emails": emails_json,
                "attributes": attributes_json,
                "active": int(active),
                "last_modified": now,
                "version": old.version + 1,
            }
            conn.execute(update(_U).where(_U.c.id == user_id).values(**values))
            if user_name != old.user_name:  # the old name stays refused
                conn.execute(insert(_U).values(**self._tombstone(old.user_name, now)))
            return DirectoryUser(
                id=user_id,
                user_name=user_name,
                external_id=external_id,
                display_name=display_name,
                emails=tuple(json.loads(emails_json)),
                active=active,
                created=old.created,
                last_modified=now,
                version=old.version + 1,
                attributes=json.loads(attributes_json),
            )

        return self._write(change)

    def delete_user(self, user_id: str, *, if_version: int | None = None) -> DirectoryUser:
        """The user becomes a tombstone and leaves its groups."""

        def change(conn: Connection) -> DirectoryUser:
            old = self._live_user(conn, user_id, if_version)
            conn.execute(delete(_M).where(_M.c.user_id == user_id))
            conn.execute(
                update(_U)
                .where(_U.c.id == user_id)
                .values(
                    deleted=1,
                    active=0,
                    external_id=None,
                    display_name=None,
                    emails="[]",
                    attributes="{}",
                    last_modified=time.time(),
                    version=old.version + 1,
                )
            )
            return old

        return self._write(change)

    @staticmethod
    def _tombstone(user_name: str, now: float) -> dict[str, Any]:
        return {
            "id": str(uuid.uuid4()),
            "user_name": user_name,
            "emails": "[]",
            "attributes": "{}",
            "active": 0,
            "deleted": 1,
            "created": now,
            "last_modified": now,
            "version": 1,
        }

    def _live_user(self, conn: Connection, user_id: str, if_version: int | None) -> DirectoryUser:
        row = conn.execute(select(_U).where(_U.c.id == user_id, _U.c.deleted == 0)).first()
        if row is None:
            raise DirectoryNotFound(f"no user with id {user_id}")
        if if_version is not None and row.version != if_version:
            raise DirectoryStale(f"user {user_id} changed since version {if_version}")
        return self._user(row)

    # SCIM groups --------------------------------------------------------------------------

    def _groups(self, conn: Connection, where: Any) -> list[DirectoryGroup]:
        rows = conn.execute(select(_G).where(where).order_by(_G.c.created, _G.c.id)).all()
        if not rows:
            return []
        members: dict[str, list[tuple[str, str]]] = {}
        ids = [r.id for r in rows]
        for group_id, user_id, user_name, named in conn.execute(
            select(_M.c.group_id, _M.c.user_id, _U.c.user_name, _M.c.user_name)
            .select_from(_M.outerjoin(_U, _U.c.id == _M.c.user_id))
            .where(_M.c.group_id.in_(ids))
            .order_by(_M.c.group_id, _U.c.user_name, _M.c.user_name)
        ):
            members.setdefault(group_id, []).append((user_id or "", user_name or named or ""))
        return [
            DirectoryGroup(
                id=r.id,
                source=r.source,
                display_name=r.display_name,
                external_id=r.external_id,
                members=tuple(members.get(r.id, ())),
                created=r.created,
                last_modified=r.last_modified,
                version=r.version,
            )
            for r in rows
        ]

    def get_group(self, group_id: str) -> DirectoryGroup | None:
        with self.store.read() as conn:
            found = self._groups(conn, and_(_G.c.id == group_id, _G.c.source == SCIM))
        return found[0] if found else None

    def list_groups(self, source: str = SCIM) -> list[DirectoryGroup]:
        with self.store.read() as conn:
            return self._groups(conn, _G.c.source == source)

    def create_group(
        self, display_name: str, *, external_id: str | None = None, member_ids: Iterable[str] = ()
    ) -> DirectoryGroup:
        now = time.time()
        group_id = str(uuid.uuid4())
        wanted = sorted(set(member_ids))

        def change(conn: Connection) -> None:
            self._free_group_name(conn, display_name, None)
            conn.execute(
                insert(_G).values(
                    id=group_id,
                    source=SCIM,
                    display_name=display_name,
                    external_id=external_id,
                    created=now,
                    last_modified=now,
                    version=1,
                )
            )
            self._set_members(conn, group_id, wanted)

        self._write(change)
        found = self.get_group(group_id)
        assert found is not None
        return found

    def replace_group(
        self,
        group_id: str,
        *,
        display_name: str,
        external_id: str | None,
        member_ids: Iterable[str],
        if_version: int | None = None,
    ) -> DirectoryGroup:
        wanted = sorted(set(member_ids))

        def change(conn: Connection) -> None:
            row = self._live_group(conn, group_id, if_version)
            self._free_group_name(conn, display_name, group_id)
            conn.execute(
                update(_G)
                .where(_G.c.id == group_id)
                .values(
                    display_name=display_name,
                    external_id=external_id,
                    last_modified=time.time(),
                    version=row.version + 1,
                )
            )
            conn.execute(delete(_M).where(_M.c.group_id == group_id))
            self._set_members(conn, group_id, wanted)

        self._write(change)
        found = self.get_group(group_id)
        assert found is not None
        return found

    def delete_group(self, group_id: str, *, if_version: int | None = None) -> None:
        def change(conn: Connection) -> None:
            self._live_group(conn, group_id, if_version)
            conn.execute(delete(_M).where(_M.c.group_id == group_id))
            conn.execute(delete(_G).where(_G.c.id == group_id))

        self._write(change)

    @staticmethod
    def _live_group(conn: Connection, group_id: str, if_version: int | None) -> Any:
        row = conn.execute(select(_G).where(_G.c.id == group_id, _G.c.source == SCIM)).first()
        if row is None:
            raise DirectoryNotFound(f"no group with id {group_id}")
        if if_version is not None and row.version != if_version:
            raise DirectoryStale(f"group {group_id} changed since version {if_version}")
        return row

    @staticmethod
    def _free_group_name(conn: Connection, display_name: str, owner: str | None) -> None:
        held = conn.execute(
            select(_G.c.id).where(_G.c.source == SCIM, _G.c.display_name == display_name)
        ).first()
        if held is not None and held.id != owner:
            raise DirectoryConflict(f"a group named {display_name} exists already")

    @staticmethod
    def _set_members(conn: Connection, group_id: str, user_ids: list[str]) -> None:
        if not user_ids:
            return
        known = {
            r.id
            for r in conn.execute(select(_U.c.id).where(_U.c.id.in_(user_ids), _U.c.deleted == 0))
        }
        unknown = [u for u in user_ids if u not in known]
        if unknown:
            raise DirectoryError(f"group members must be users of this directory: {unknown[0]}")
        conn.execute(insert(_M), [{"group_id": group_id, "user_id": u} for u in user_ids])

    # whole snapshots (LDAP) ---------------------------------------------------------------

    def replace_source_groups(self, source: str, groups: Mapping[str, Iterable[str]]) -> None:
        """The whole snapshot of `source`'s groups: group name -> member user names
        (canonical), replacing that source's previous snapshot in one transaction. Not for
        `scim`, whose groups change one at a time."""
        if source == SCIM:
            raise DirectoryError("the scim source's groups are changed through SCIM")
        now = time.time()
        rows = [(name, sorted(set(members))) for name, members in sorted(groups.items())]

        def change(conn: Connection) -> None:
            old = [r.id for r in conn.execute(select(_G.c.id).where(_G.c.source == source))]
            if old:
                conn.execute(delete(_M).where(_M.c.group_id.in_(old)))
                conn.execute(delete(_G).where(_G.c.source == source))
            members: list[dict[str, Any]] = []
            for name, users in rows:
                group_id = str(uuid.uuid4())
                conn.execute(
                    insert(_G).values(
                        id=group_id,
                        source=source,
                        display_name=name,
                        created=now,
                        last_modified=now,
                        version=1,
                    )
                )
                members += [{"group_id": group_id, "user_name": u} for u in users]
            if members:
                conn.execute(insert(_M), members)

        self._write(change)
