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

"""iSCSI driver on tgtd whose force-detach really removes the export.

``volume_driver = cinder_forcedetach.drivers.iscsi.TgtISCSIDriver``

Volumes are sparse raw files (:mod:`cinder_forcedetach.storage.files`),
exported one target per volume by
:mod:`cinder_forcedetach.targets.cinder_tgt` (on tgtadm),
each export with its own CHAP account, created anew whenever the export is
created, and one ACL entry per initiator.  Revoking a host unbinds its ACL
and closes its sessions; removing the export removes target, LUN and CHAP
account, so a fenced initiator that reconnects is refused even after the
volume is exported again to another host.
"""

from __future__ import annotations

from typing import Any, Optional, TYPE_CHECKING

from cinder.common import constants
from cinder import interface
from oslo_log import log as logging

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach.drivers import common
from cinder_forcedetach import mixin
from cinder_forcedetach.targets import cinder_tgt

if TYPE_CHECKING:
    from cinder import context as cinder_context
    from cinder import objects
    from oslo_config import cfg

    from cinder_forcedetach import host_access

LOG = logging.getLogger(__name__)

# Read by the shared export layer, which owns them; the name stays.
iscsi_opts = cinder_tgt.tgt_opts


@interface.volumedriver
class TgtISCSIDriver(mixin.ForceDetachMixin, common.FileVolumeDriver):
    """Sparse-file volumes exported by tgtd, with safe force-detach.

    Active-active: the volume services of one cluster must share the
    volumes directory, tgtd and oslo.concurrency's ``lock_path`` (one
    host, as in ``tools/stack.sh up --volume-services 2``); every grant
    and teardown of a volume takes its tooz lock.
    """

    DEFAULT_BACKEND_NAME = 'tgt_forcedetach'
    SUPPORTS_ACTIVE_ACTIVE = True
    protocol = constants.ISCSI
    required_connector_fields = cinder_tgt.REQUIRED_CONNECTOR_FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super(TgtISCSIDriver, self).__init__(*args, **kwargs)
        self.exports = cinder_tgt.VolumeExports(self.configuration)
        self.target = self.exports.target

    @staticmethod
    def get_driver_options() -> list[cfg.Opt]:
        return (mixin.ForceDetachMixin.get_driver_options() +
                common.volume_file_opts + cinder_tgt.tgt_opts)

    # -- setup ---------------------------------------------------------------

    def check_for_setup_error(self) -> None:
        """Fail when tgtd is not reachable on its control port."""
        self.target.list_targets()

    # -- naming ------------------------------------------------------------

    def target_name(self, volume: objects.Volume) -> str:
        return self.exports.target_name(volume)

    # -- export (cinder_forcedetach.targets.cinder_tgt.VolumeExports) ------

    def create_export(self, context: cinder_context.RequestContext,
                      volume: objects.Volume, connector: dict[str, Any]
                      ) -> dict[str, Optional[str]]:
        """Export the volume; a new export gets a new CHAP account."""
        location, auth = self.exports.create(volume, self.local_path(volume))
        return {'provider_location': location, 'provider_auth': auth}

    def ensure_export(self, context: cinder_context.RequestContext,
                      volume: objects.Volume) -> None:
        """Re-create a lost export (tgtd restarted) for attached hosts.

        Not for the hosts of a force-detach that a crash interrupted: its
        re-run finishes their teardown.
        """
        self.exports.ensure(volume, self.local_path(volume),
                            fd_attachments.hosts_in_teardown(volume))

    def remove_export(self, context: cinder_context.RequestContext,
                      volume: objects.Volume) -> None:
        """Remove target, LUN, sessions and CHAP account; idempotent.

        Kept while the host of another live attachment still has access.
        """
        self.exports.remove(volume)

    def extend_volume(self, volume: objects.Volume, new_size: int) -> None:
        """Grow the file; an exported volume's target is made again.

        tgtd reads a LUN's size when the LUN is made, so attached hosts
        would not see the new size: see
        :meth:`cinder_forcedetach.targets.cinder_tgt.VolumeExports.remake`.
        """
        super(TgtISCSIDriver, self).extend_volume(volume, new_size)
        self.exports.remake(volume, self.local_path(volume))

    def connection_data(self, volume: objects.Volume) -> dict[str, Any]:
        return self.exports.connection_data(volume)

    def initialize_connection(self, volume: objects.Volume,
                              connector: dict[str, Any]) -> dict[str, Any]:
        self.validate_connector(connector)
        return self.exports.connect(volume, connector,
                                    self.local_path(volume))

    # -- force-detach hooks ------------------------------------------------

    def revoke_host_access(self, volume: objects.Volume,
                           connector: Optional[dict[str, Any]]) -> bool:
        """Unbind the host's ACL and drop its sessions (None: every host).

        See :meth:`cinder_forcedetach.targets.cinder_tgt.VolumeExports.revoke`.
        """
        return self.exports.revoke(volume, connector)

    def audit_holders(self) -> dict[str, list[host_access.Holder]]:
        """ACL entries and sessions of every target (one ``tgtadm show``)."""
        return self.exports.holders()

    def volume_holders(self, volume: objects.Volume
                       ) -> list[host_access.Holder]:
        """ACL entries and sessions of the volume's target (one read)."""
        return self.exports.volume_holders(volume)

    def local_connection_info(self, volume: objects.Volume,
                              connector: dict[str, Any]) -> dict[str, Any]:
        return {'driver_volume_type': 'iscsi',
                'data': self.connection_data(volume)}
