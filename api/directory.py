"""The directory of one Lakegate process (catalog/directory.py), shared by its REST service,
SCIM endpoint and Connect gateway, with each source's group mapping from `identity:`."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from catalog.directory import SCIM, DirectoryStore
from governance.identity import GroupMapping

if TYPE_CHECKING:
    from governance.session import Lakegate

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
