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

"""Cinder's LVM driver plus safe force-detach: a drop-in.

``volume_driver = cinder_forcedetach.drivers.lvm.LVMVolumeDriver``

:class:`LVMVolumeDriver` is upstream's
``cinder.volume.drivers.lvm.LVMVolumeDriver`` (every option and feature:
thick and thin LVs, snapshots, clones, extend, migration, manage/unmanage,
revert to snapshot) with :class:`~cinder_forcedetach.mixin.ForceDetachMixin`.

With ``target_helper = tgtadm`` (the default) its target driver is ours,
:class:`cinder_forcedetach.targets.cinder_tgt.TgtTarget`: one tgt target per
LV, a CHAP account per export, one ACL entry per initiator; detach,
attachment delete and ``os-force_detach`` run the force-detach flow, which
unbinds the host's initiator and drops its sessions (other hosts with live
attachments keep theirs), then removes target, LUN and CHAP account.
Upstream's ``TgtAdm`` does none of that: its target admits every initiator
and its ``terminate_connection`` does nothing, so a force-detached host
goes on writing.

Any other ``target_helper`` (``lioadm``, ``nvmet``, ...) stays upstream's:
force-detach still runs the flow, with upstream's
``terminate_connection`` of that target as the access revocation, and says
so in a warning.
"""

from __future__ import annotations

from typing import Any, Optional, TYPE_CHECKING

from cinder import interface
from cinder.volume.drivers import lvm as upstream_lvm
from oslo_log import log as logging

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach import mixin
from cinder_forcedetach.targets import cinder_tgt

if TYPE_CHECKING:
    from cinder import objects
    from oslo_config import cfg

    from cinder_forcedetach import host_access

LOG = logging.getLogger(__name__)

#: Our target driver for ``target_helper = tgtadm``.
TGT_TARGET = 'cinder_forcedetach.targets.cinder_tgt.TgtTarget'


@interface.volumedriver
class LVMVolumeDriver(mixin.ForceDetachMixin, upstream_lvm.LVMVolumeDriver):
    """Upstream's LVM driver whose force-detach revokes the tgt target."""

    CI_WIKI_NAME = 'cinder-forcedetach_CI'

    @classmethod
    def get_driver_options(cls) -> list[cfg.Opt]:
        return (upstream_lvm.LVMVolumeDriver.get_driver_options() +
                mixin.ForceDetachMixin.get_driver_options() +
                cinder_tgt.tgt_opts)

    # Cinder's BaseVD sets the helper -> target driver mapping, and
    # upstream's __init__ reads it right after: ours serves tgtadm.
    @property
    def target_mapping(self) -> dict[str, str]:
        return self._target_mapping

    @target_mapping.setter
    def target_mapping(self, mapping: dict[str, str]) -> None:
        mapping = dict(mapping)
        mapping['tgtadm'] = TGT_TARGET
        self._target_mapping = mapping

    @property
    def our_target(self) -> bool:
        """Whether the target driver is ours (target_helper = tgtadm)."""
        return isinstance(self.target_driver, cinder_tgt.TgtTarget)

    # -- connections -------------------------------------------------------

    # Any: the target driver's answer (Cinder's iSCSI targets: True).
    def validate_connector(self, connector: dict[str, Any]) -> Any:
        """The connector grammar, then what the target driver needs."""
        super(LVMVolumeDriver, self).validate_connector(connector)
        return self.target_driver.validate_connector(connector)

    def initialize_connection(self, volume: objects.Volume,
                              connector: dict[str, Any]) -> dict[str, Any]:
        """On our tgt target, a lost export is made again from the LV.

        See ``VolumeExports.connect`` in
        :mod:`cinder_forcedetach.targets.cinder_tgt`.
        """
        if self.our_target:
            return self.target_driver.initialize_connection(
                volume, connector, volume_path=self.local_path(volume))
        return super(LVMVolumeDriver, self).initialize_connection(
            volume, connector)

    def local_connection_info(self, volume: objects.Volume,
                              connector: dict[str, Any]
                              ) -> Optional[dict[str, Any]]:
        if self.our_target:
            return self.target_driver.local_connection_info(volume)
        return None

    def audit_holders(self) -> dict[str, list[host_access.Holder]]:
        """On our tgt target: its ACL entries and sessions (one read)."""
        if not self.our_target:
            raise NotImplementedError()
        return self.target_driver.exports.holders()

    def volume_holders(self, volume: objects.Volume
                       ) -> Optional[list[host_access.Holder]]:
        """On our tgt target: the volume's ACL entries and sessions."""
        if not self.our_target:
            return None
        return self.target_driver.exports.volume_holders(volume)

    # -- force-detach hooks ------------------------------------------------

    def revoke_host_access(self, volume: objects.Volume,
                           connector: Optional[dict[str, Any]]) -> bool:
        """Unbind the host's initiator and drop its sessions (None: all).

        On our tgt target: see
        :meth:`cinder_forcedetach.targets.cinder_tgt.VolumeExports.revoke`.
        On another target driver: its own ``terminate_connection`` for the
        host (for every attached host when *connector* is None).
        """
        if self.our_target:
            return self.target_driver.revoke(volume, connector)
        LOG.warning('Volume %(vol)s: target_helper %(helper)s is upstream\'s;'
                    ' access revocation is its terminate_connection, which '
                    'may leave the host able to reach the target.',
                    {'vol': volume.id,
                     'helper': self.configuration.safe_get('target_helper')})
        if connector is not None:
            self.target_driver.terminate_connection(volume, connector)
            return bool(fd_attachments.of_other_hosts(
                volume.volume_attachment, connector))
        for attachment in volume.volume_attachment:
            if fd_attachments.is_live(attachment) and attachment.connector:
                self.target_driver.terminate_connection(
                    volume, attachment.connector)
        return False
