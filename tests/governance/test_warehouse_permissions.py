"""The trust boundary on disk: only the service's own user can read the warehouse."""

from __future__ import annotations

import os
import stat


def test_warehouse_files_are_readable_by_the_service_user_only(lakehouse) -> None:
    root = lakehouse.catalog.warehouse
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
            seen += 1
    assert seen > 20  # the demo tables' data files, logs and checksums were all checked
