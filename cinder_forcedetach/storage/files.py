#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""Volumes as sparse raw files in one directory.

This machine class has no device-mapper (so no LVM) and no loop-backed
block devices for tgtd to need; a file is what ``tgtd``'s ``rdwr`` backing
store reads anyway.  The class is small on purpose: a vendor or an LVM
store replaces it without touching the driver's export logic.
"""

from __future__ import annotations

import errno
import os
from typing import Any, Callable, Optional

from oslo_concurrency import processutils
from oslo_log import log as logging
from oslo_utils import units

LOG = logging.getLogger(__name__)


class FileStore(object):
    """Create, copy, grow and delete sparse raw volume files."""

    def __init__(self, directory: str,
                 execute: Callable[..., Any] = processutils.execute
                 ) -> None:
        self.directory = directory
        self._execute = execute

    def setup(self) -> None:
        os.makedirs(self.directory, mode=0o750, exist_ok=True)

    def path(self, name: str) -> str:
        if os.sep in name or name in ('', '.', '..'):
            raise ValueError('invalid volume file name %r' % name)
        return os.path.join(self.directory, name)

    def exists(self, name: str) -> bool:
        return os.path.exists(self.path(name))

    def create(self, name: str, size_gb: int) -> None:
        with open(self.path(name), 'xb') as f:
            f.truncate(size_gb * units.Gi)

    def resize(self, name: str, size_gb: int) -> None:
        path = self.path(name)
        if os.path.getsize(path) > size_gb * units.Gi:
            raise ValueError('refusing to shrink %s' % name)
        os.truncate(path, size_gb * units.Gi)

    def copy(self, source: str, dest: str,
             size_gb: Optional[int] = None) -> None:
        """Sparse copy of *source* into a new file *dest* (reflink if any)."""
        self._copy_file(self.path(source), self.path(dest), size_gb)

    def copy_out(self, name: str, other: FileStore) -> None:
        """Sparse copy of *name* into store *other*, under the same name.

        It refuses to replace a file *other* already holds.
        """
        dest_path = other.path(name)
        if os.path.exists(dest_path):
            raise FileExistsError(errno.EEXIST, 'volume file exists',
                                  dest_path)
        self._copy_file(self.path(name), dest_path)

    def _copy_file(self, source_path: str, dest_path: str,
                   size_gb: Optional[int] = None) -> None:
        tmp_path = dest_path + '.part'
        self._execute('cp', '--sparse=always', '--reflink=auto',
                      source_path, tmp_path)
        if size_gb:
            os.truncate(tmp_path, max(os.path.getsize(tmp_path),
                                      size_gb * units.Gi))
        os.rename(tmp_path, dest_path)

    def adopt(self, source: str, dest: str) -> int:
        """Rename *source* to *dest*, grown to a whole GiB; its GiB."""
        source_path, dest_path = self.path(source), self.path(dest)
        if source_path != dest_path:
            # A link, not a rename: it refuses to replace an existing file.
            os.link(source_path, dest_path)
            os.unlink(source_path)
        size_gb = self.size_gb(dest)
        if os.path.getsize(dest_path) < size_gb * units.Gi:
            os.truncate(dest_path, size_gb * units.Gi)
        return size_gb

    def size_gb(self, name: str) -> int:
        """The file's size in GiB, rounded up."""
        return -(-os.path.getsize(self.path(name)) // units.Gi)

    def names(self) -> list[str]:
        """Names of the volume files (not copies in flight)."""
        with os.scandir(self.directory) as entries:
            return sorted(e.name for e in entries
                          if e.is_file(follow_symlinks=False) and
                          not e.name.endswith('.part'))

    def delete(self, name: str) -> None:
        try:
            os.unlink(self.path(name))
        except FileNotFoundError:
            LOG.debug('Volume file %s already deleted.', name)

    def capacity(self) -> tuple[float, float, float]:
        """(total, free, allocated) GiB of the volumes' filesystem."""
        st = os.statvfs(self.directory)
        total = st.f_blocks * st.f_frsize / units.Gi
        free = st.f_bavail * st.f_frsize / units.Gi
        allocated = 0
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if entry.is_file():
                    allocated += entry.stat().st_size
        return round(total, 2), round(free, 2), round(allocated / units.Gi, 2)
