"""The directory of one Lakegate process (catalog/directory.py), shared by its REST service,
SCIM endpoint and Connect gateway, with each source's group mapping from `identity:`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from api.ldap_sync import LdapSync
from catalog.directory import SCIM, DirectoryStore
from governance.identity import GroupMapping

if TYPE_CHECKING:
    from governance.session.governed import Lakegate

LDAP = "ldap"
_DIRECTORIES: WeakKeyDictionary[Lakegate, DirectoryStore] = WeakKeyDictionary()
_LOCK = threading.Lock()


def directory_of(lg: Lakegate) -> DirectoryStore:
    """The one DirectoryStore over `lg`'s catalog database (made on first use). It is always
    consulted: with no directory data the snapshot is empty and costs one small read every
    two seconds. Sources not configured keep valid provider names as policy groups."""
    with _LOCK:
        found = _DIRECTORIES.get(lg)
        if found is None:
            identity = lg.config.identity
            scim = identity.scim.groups if identity.scim else GroupMapping()
            ldap = identity.ldap.groups if identity.ldap else GroupMapping()
            found = DirectoryStore(lg.catalog.store, {SCIM: scim.apply, LDAP: ldap.apply})
            _DIRECTORIES[lg] = found
        return found


@contextmanager
def directory_sync(lg: Lakegate) -> Iterator[LdapSync | None]:
    """While a server runs: the LDAP directory's groups synced into the directory every
    `identity.ldap.interval` seconds (the last good set kept when it cannot be read); none
    without an `identity.ldap` section. Both servers run it (a sync replaces the whole LDAP
    snapshot in one transaction, so two writers agree)."""
    ldap = lg.config.identity.ldap
    if ldap is None:
        yield None
        return
    sync = LdapSync(ldap, partial(directory_of(lg).replace_source_groups, LDAP))
    sync.start()
    try:
        yield sync
    finally:
        sync.stop()
