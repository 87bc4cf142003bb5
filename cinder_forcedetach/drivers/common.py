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

"""What the file-backed drivers share: sparse-file volumes and their stats.

Volumes, snapshots and clones are sparse raw files of a
:class:`~cinder_forcedetach.storage.files.FileStore`; a protocol driver
(iSCSI on tgtd, Fibre Channel on an array) adds only how hosts reach them.
List :class:`~cinder_forcedetach.mixin.ForceDetachMixin` first::

    class MyDriver(mixin.ForceDetachMixin, common.FileVolumeDriver):
        protocol = constants.FC
"""

from __future__ import annotations

import os
import re
import socket
import stat
from typing import Any, Iterable, Optional

from cinder import context as cinder_context
from cinder import exception
from cinder.i18n import _
from cinder import objects
from cinder.volume import configuration
from cinder.volume import driver
from cinder.volume import volume_utils
from oslo_config import cfg

from cinder_forcedetach.storage import files

volume_file_opts = [
    cfg.StrOpt('forcedetach_volumes_dir',
               default='$state_path/forcedetach-volumes',
               help='Directory holding the sparse raw files that back '
                    'volumes of the tgt iSCSI driver.'),
]

cfg.CONF.register_opts(volume_file_opts,
                       group=configuration.SHARED_CONF_GROUP)

#: The first field of this store's ``location_info`` (migration).
LOCATION_KIND = 'FileVolumeDriver'

#: What a ``source-name`` of manage-existing may be: a plain file name of
#: the volumes directory (no path, no hidden file, not a copy in flight).
SOURCE_NAME = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$')


class FileVolumeDriver(driver.VolumeDriver):
    """Sparse-file volumes; subclasses set ``protocol`` and connect hosts."""

    VERSION = '1.0.0'
    CI_WIKI_NAME = 'cinder-forcedetach_CI'
    DEFAULT_BACKEND_NAME = 'forcedetach'
    protocol: Optional[str] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super(FileVolumeDriver, self).__init__(*args, **kwargs)
        self.configuration.append_config_values(volume_file_opts)
        conf = self.configuration
        self.backend_name = (conf.safe_get('volume_backend_name') or
                             self.DEFAULT_BACKEND_NAME)
        self.store = files.FileStore(conf.forcedetach_volumes_dir,
                                     execute=self._execute)

    def do_setup(self, context: cinder_context.RequestContext) -> None:
        self.store.setup()

    def local_path(self, volume: objects.Volume) -> str:
        return self.store.path(volume.name)

    # -- volumes and snapshots ---------------------------------------------

    def create_volume(self, volume: objects.Volume) -> None:
        self.store.create(volume.name, volume.size)

    def delete_volume(self, volume: objects.Volume) -> None:
        self.store.delete(volume.name)

    def extend_volume(self, volume: objects.Volume, new_size: int) -> None:
        self.store.resize(volume.name, new_size)

    def discard_volume(self, volume: objects.Volume) -> bool:
        """Deallocate the volume file, keeping its size; returns True.

        It then reads zeros, so an image written next may skip its own.
        """
        path = self.local_path(volume)
        size = os.path.getsize(path)
        os.truncate(path, 0)
        os.truncate(path, size)
        return True

    def create_snapshot(self, snapshot: objects.Snapshot) -> None:
        self.store.copy(snapshot.volume_name, snapshot.name)

    def delete_snapshot(self, snapshot: objects.Snapshot) -> None:
        self.store.delete(snapshot.name)

    def revert_to_snapshot(self, context: cinder_context.RequestContext,
                           volume: objects.Volume,
                           snapshot: objects.Snapshot) -> None:
        """Copy the snapshot over the volume, keeping the volume's size.

        Cinder reverts only an ``available`` volume, which is not exported:
        the file is replaced (copy, then rename) with no target serving it.
        Without this Cinder falls back to its generic revert, which attaches
        both to the volume host.
        """
        self.store.copy(snapshot.name, volume.name, size_gb=volume.size)

    def create_volume_from_snapshot(self, volume: objects.Volume,
                                    snapshot: objects.Snapshot) -> None:
        self.store.copy(snapshot.name, volume.name, size_gb=volume.size)

    def create_cloned_volume(self, volume: objects.Volume,
                             src_vref: objects.Volume) -> None:
        self.store.copy(src_vref.name, volume.name, size_gb=volume.size)

    # -- manage and unmanage ------------------------------------------------

    def _existing_file(self, existing_ref: dict[str, Any] | str) -> str:
        """The store file a manage reference names, checked; its name.

        The name is a client's: it must be a plain file name of the volumes
        directory (``SOURCE_NAME``), of a regular file (not a link), and not
        the file of a volume or snapshot Cinder already manages.
        """
        if not isinstance(existing_ref, dict):
            existing_ref = {'source-name': existing_ref}
        name = existing_ref.get('source-name')
        if (not isinstance(name, str) or not SOURCE_NAME.match(name) or
                name.endswith('.part')):
            raise exception.ManageExistingInvalidReference(
                existing_ref=existing_ref,
                reason=_('source-name must be the name of a file in the '
                         'volumes directory'))
        try:
            mode = os.lstat(self.store.path(name)).st_mode
        except FileNotFoundError:
            mode = None
        if mode is None or not stat.S_ISREG(mode):
            raise exception.ManageExistingInvalidReference(
                existing_ref=name,
                reason=_('Specified volume file does not exist.'))
        admin = cinder_context.get_admin_context()
        volume_id = volume_utils.extract_id_from_volume_name(name)
        snapshot_id = volume_utils.extract_id_from_snapshot_name(name)
        if (volume_utils.check_already_managed_volume(volume_id) or
                (snapshot_id and objects.Snapshot.exists(admin,
                                                         snapshot_id))):
            raise exception.ManageExistingAlreadyManaged(volume_ref=name)
        return name

    def manage_existing_get_size(self, volume: objects.Volume,
                                 existing_ref: dict[str, Any] | str) -> int:
        return self.store.size_gb(self._existing_file(existing_ref))

    def manage_existing(self, volume: objects.Volume,
                        existing_ref: dict[str, Any] | str) -> None:
        """Rename the file to the volume's name, grown to whole GiB."""
        self.store.adopt(self._existing_file(existing_ref), volume.name)

    def unmanage(self, volume: objects.Volume) -> None:
        """Leave the file, under its name, for a later manage."""

    def manage_existing_snapshot_get_size(
            self, snapshot: objects.Snapshot,
            existing_ref: dict[str, Any] | str) -> int:
        return self.store.size_gb(self._existing_file(existing_ref))

    def manage_existing_snapshot(self, snapshot: objects.Snapshot,
                                 existing_ref: dict[str, Any] | str) -> None:
        self.store.adopt(self._existing_file(existing_ref), snapshot.name)

    def unmanage_snapshot(self, snapshot: objects.Snapshot) -> None:
        """Leave the file, under its name, for a later manage."""

    def _manageable(self,
                    cinder_resources: Iterable[objects.Volume |
                                               objects.Snapshot],
                    snapshots: bool, marker: Optional[dict[str, Any] | str],
                    limit: Optional[int], offset: Optional[int],
                    sort_keys: list[str], sort_dirs: list[str]
                    ) -> list[dict[str, Any]]:
        """Files as Cinder's manageable list; a snapshot-<id> is one."""
        managed = {r['id'] for r in cinder_resources}
        entries = []
        for name in self.store.names():
            snapshot_id = volume_utils.extract_id_from_snapshot_name(name)
            if bool(snapshot_id) != snapshots:
                continue
            cinder_id = snapshot_id or (
                volume_utils.extract_id_from_volume_name(name))
            entry = {'reference': {'source-name': name},
                     'size': self.store.size_gb(name),
                     'cinder_id': cinder_id if cinder_id in managed else None,
                     'safe_to_manage': cinder_id not in managed,
                     'reason_not_safe': (
                         'already managed' if cinder_id in managed else None),
                     'extra_info': None}
            if snapshots:
                # A snapshot file is a full copy; it does not name its
                # volume.
                entry['source_reference'] = {'source-name': None}
            entries.append(entry)
        return volume_utils.paginate_entries_list(
            entries, marker, limit, offset, sort_keys, sort_dirs)

    def get_manageable_volumes(self, cinder_volumes: list[objects.Volume],
                               marker: Optional[dict[str, Any] | str],
                               limit: Optional[int], offset: Optional[int],
                               sort_keys: list[str], sort_dirs: list[str]
                               ) -> list[dict[str, Any]]:
        return self._manageable(cinder_volumes, False, marker, limit, offset,
                                sort_keys, sort_dirs)

    def get_manageable_snapshots(self,
                                 cinder_snapshots: list[objects.Snapshot],
                                 marker: Optional[dict[str, Any] | str],
                                 limit: Optional[int], offset: Optional[int],
                                 sort_keys: list[str], sort_dirs: list[str]
                                 ) -> list[dict[str, Any]]:
        return self._manageable(cinder_snapshots, True, marker, limit,
                                offset, sort_keys, sort_dirs)

    # -- retype and migration -----------------------------------------------

    def retype(self, context: cinder_context.RequestContext,
               volume: objects.Volume, new_type: dict[str, Any],
               diff: dict[str, Any], host: dict[str, Any]
               ) -> tuple[bool, Optional[dict[str, Any]]]:
        """A file keeps nothing of its type: on this backend, retyped.

        Cinder calls it only when the volume stays on this backend (to a
        multiattach type, say); a move to another backend is
        :meth:`migrate_volume`.
        """
        return True, None

    def location_info(self) -> str:
        """``FileVolumeDriver:<machine>:<volumes dir>`` for the scheduler."""
        return '%s:%s:%s' % (LOCATION_KIND, socket.gethostname(),
                             self.store.directory)

    def migrate_volume(self, context: cinder_context.RequestContext,
                       volume: objects.Volume, host: dict[str, Any]
                       ) -> tuple[bool, Optional[dict[str, Any]]]:
        """Copy a detached volume to a file backend of this machine.

        Cinder calls it for a migration or a retype (status
        ``maintenance`` or ``retyping``) of a volume without attachments.
        *host* is the destination the scheduler chose; its
        ``location_info`` names a file store. Anything else (another
        machine, another kind of backend, a volume with attachments, whose
        file a target may serve) returns ``(False, None)``: Cinder then
        migrates the generic way.
        """
        kind, _sep, rest = (host.get('capabilities', {}).get(
            'location_info') or '').partition(':')
        machine, _sep, directory = rest.partition(':')
        if (kind != LOCATION_KIND or machine != socket.gethostname() or
                volume.volume_attachment or
                not os.path.isabs(directory) or
                not os.path.isdir(directory) or
                os.path.realpath(directory) == os.path.realpath(
                    self.store.directory)):
            return False, None
        self.store.copy_out(volume.name, files.FileStore(directory))
        self.store.delete(volume.name)
        return True, None

    def copy_volume_to_image(self, context: cinder_context.RequestContext,
                             volume: objects.Volume, image_service: Any,
                             image_meta: dict[str, Any]) -> None:
        volume_utils.upload_volume(context, image_service, image_meta,
                                   self.local_path(volume), volume)

    def clone_image(self, context: cinder_context.RequestContext,
                    volume: objects.Volume, image_location: Any,
                    image_meta: dict[str, Any], image_service: Any
                    ) -> tuple[Optional[dict[str, Any]], bool]:
        return None, False

    def _update_volume_stats(self) -> None:
        total, free, allocated = self.store.capacity()
        self._stats = {
            'volume_backend_name': self.backend_name,
            'vendor_name': 'Open Source',
            'driver_version': self.VERSION,
            'storage_protocol': self.protocol,
            'total_capacity_gb': total,
            'free_capacity_gb': free,
            'provisioned_capacity_gb': allocated,
            'reserved_percentage':
                self.configuration.safe_get('reserved_percentage') or 0,
            'max_over_subscription_ratio':
                self.configuration.safe_get('max_over_subscription_ratio'),
            'location_info': self.location_info(),
            'thin_provisioning_support': True,
            'thick_provisioning_support': False,
            'multiattach': True,
            'QoS_support': False,
        }
